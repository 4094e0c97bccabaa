/**
 * Private `redis-server`s for the tests, started from the binary on this machine in a temporary directory, on
 * ports chosen free: for settings the shared server must keep (`hz 1`), a cluster (redis-cluster.ts), or a
 * server a test may stop. Torn down by the test.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';

const run = promisify(execFile);

/** Whether `port` can be listened on right now. */
function free(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** `count` free ports; with `bus`, each also free at port + 10000 (a cluster node's bus). */
export async function freePorts(count: number, bus = false): Promise<number[]> {
  const ports: number[] = [];
  for (let port = 20_000 + Math.floor(Math.random() * 9_000); ports.length < count && port < 30_000; port++) {
    if ((await free(port)) && (!bus || (await free(port + 10_000)))) ports.push(port);
  }
  if (ports.length < count) throw new Error('no free ports for a test redis-server');
  return ports;
}

/** Whether a `redis-server` and `redis-cli` can be run here. */
export async function canRunRedisServer(): Promise<boolean> {
  try {
    await run('redis-server', ['--version']);
    await run('redis-cli', ['--version']);
    return true;
  } catch {
    return false;
  }
}

/** Starts `redis-server` on `port`, its files in `dir`, nothing persisted, with `extra` arguments. */
export function spawnRedisServer(port: number, dir: string, extra: string[] = []): ChildProcess {
  return spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', ...extra],
    { stdio: 'ignore' },
  );
}

/** A client for a test's own bookkeeping on a private server: retries while it starts, errors kept quiet. */
export async function adminOf(port: number): Promise<Redis> {
  const admin = new Redis({ port, host: '127.0.0.1', retryStrategy: (n) => (n > 100 ? null : 20) });
  // The server may not listen yet: refused connections are expected, and retried.
  admin.on('error', () => {});
  await admin.ping();
  return admin;
}

/** Stops `servers` (SIGKILL: nothing to persist) and waits until they have exited. */
export async function killAll(servers: ChildProcess[]): Promise<void> {
  for (const server of servers) server.kill('SIGKILL');
  await Promise.all(servers.map((server) => (server.exitCode === null ? once(server, 'exit') : undefined)));
}

/** One private server. */
export interface PrivateRedis {
  port: number;
  url: string;
  /** A plain client on it, for CLIENT LIST and the like. */
  admin: Redis;
  /**
   * Kills the server (SIGKILL: every connection drops, nothing is saved), awaits `whileDown`, and starts it again
   * on its port; resolves once it answers.
   */
  restart(whileDown?: () => Promise<unknown>): Promise<{ downAt: number; upAt: number }>;
  stop(): Promise<void>;
}

/** Starts one private server with `extra` arguments (`['--hz', '1']`) and waits until it answers. */
export async function startRedisServer(extra: string[] = []): Promise<PrivateRedis> {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-redis-'));
  const [port] = (await freePorts(1)) as [number];
  let server = spawnRedisServer(port, dir, extra);
  let admin: Redis | undefined;
  const stop = async () => {
    admin?.disconnect();
    await killAll([server]);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    admin = await adminOf(port);
  } catch (error) {
    await stop();
    throw error;
  }
  const restart = async (whileDown?: () => Promise<unknown>) => {
    await killAll([server]);
    const downAt = performance.now();
    await whileDown?.();
    server = spawnRedisServer(port, dir, extra);
    // Asked until it answers again (the admin reconnects by itself, retrying every 20 ms).
    const end = performance.now() + 10_000;
    for (;;) {
      try {
        await (admin as Redis).ping();
        return { downAt, upAt: performance.now() };
      } catch (error) {
        if (performance.now() > end) throw error;
      }
    }
  };
  return { port, url: `redis://127.0.0.1:${port}`, admin, restart, stop };
}
