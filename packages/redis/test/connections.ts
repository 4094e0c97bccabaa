/**
 * What the fault and exactness tests need to see and act on the server's side: which connections are there
 * (by name) and which are blocked, killing only the test's own, and whether anything reached the process.
 */
import type { Redis } from 'ioredis';

export interface ClientLine {
  id: string;
  name: string;
  flags: string;
  cmd: string;
}

/** The server's `CLIENT LIST`, parsed. */
export async function clientList(admin: Redis): Promise<ClientLine[]> {
  const list = (await admin.client('LIST')) as string;
  return list
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => ({
      id: /\bid=(\d+)/.exec(line)?.[1] ?? '',
      name: /\bname=(\S*)/.exec(line)?.[1] ?? '',
      flags: /\bflags=(\S*)/.exec(line)?.[1] ?? '',
      cmd: /\bcmd=(\S*)/.exec(line)?.[1] ?? '',
    }));
}

/** Ids of the connections named `name`. */
export async function idsNamed(admin: Redis, name: string): Promise<string[]> {
  return (await clientList(admin)).filter((c) => c.name === name).map((c) => c.id);
}

/** Whether connection `id` is blocked right now (flag `b`), in `cmd` when given. */
export async function isBlocked(admin: Redis, id: string, cmd?: string): Promise<boolean> {
  return (await clientList(admin)).some((c) => c.id === id && c.flags.includes('b') && (cmd ?? c.cmd) === c.cmd);
}

/** Asks (command after command, no sleeping) until `id` is blocked (in `cmd`) / no longer blocked; resolves when. */
export async function untilBlocked(
  admin: Redis,
  id: string,
  blocked: boolean,
  limitMs = 5_000,
  cmd?: string,
): Promise<number> {
  const end = performance.now() + limitMs;
  while (performance.now() < end) if ((await isBlocked(admin, id, cmd)) === blocked) return performance.now();
  throw new Error(`client ${id} ${blocked ? 'never blocked' : 'still blocked'}`);
}

/** Kills the connections named `name` (the test's own: it named them); resolves with their ids. */
export async function killNamed(admin: Redis, name: string): Promise<string[]> {
  const ids = await idsNamed(admin, name);
  for (const id of ids) await admin.client('KILL', 'ID', id);
  return ids;
}

/** Asks until a connection named `name` is there again (a reconnect); resolves with its ids. */
export async function untilNamed(admin: Redis, name: string, except: string[] = [], limitMs = 5_000) {
  const end = performance.now() + limitMs;
  while (performance.now() < end) {
    const ids = (await idsNamed(admin, name)).filter((id) => !except.includes(id));
    if (ids.length > 0) return ids;
  }
  throw new Error(`no connection named ${name} came back`);
}

/** The p-th percentile (0–100) of `values`, nearest rank. */
export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN;
}
