/**
 * A PostgreSQL server of a test's own, for faults the shared one must never see (a restart, a failover): made
 * with this machine's server binaries in a temporary directory, on a free port of 127.0.0.1, with its Unix
 * socket in that directory and fsync off. It starts in about a second; `destroy()` stops it and removes the
 * directory. Run as root, the server runs as the `postgres` OS user (PostgreSQL refuses root).
 *
 * Missing binaries follow services.ts: under `CI=true` the test file fails, naming what is missing; elsewhere
 * its tests are skipped with a message.
 */
import { execFile, execFileSync } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './free-port.ts';

const run = promisify(execFile);
const SERVER_BINARIES = ['initdb', 'pg_ctl', 'postgres'];

/** Where the server binaries are, and whom to run them as (when this process is root). */
export interface PostgresBinaries {
  bindir: string;
  user: { uid: number; gid: number } | undefined;
}

/** A private server: its URL, and how to stop, start and remove it. */
export interface PrivatePostgres {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication). */
  readonly url: string;
  readonly port: number;
  /** Stops the server, `-m fast`: every session is terminated (57P01), as in a restart or a failover. */
  stop(): Promise<void>;
  /** Starts it again on the same port; resolves once pg_ctl has seen it ready. */
  start(): Promise<void>;
  /** Stops it at once and removes its directory. Safe to call twice, or after a failed start. */
  destroy(): Promise<void>;
}

/** The directories that may hold the server binaries, most likely first. */
function candidateBindirs(): string[] {
  const dirs: string[] = [];
  try {
    dirs.push(
      execFileSync('pg_config', ['--bindir'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim(),
    );
  } catch {
    // No pg_config on PATH: look where the packages put the binaries.
  }
  // Debian and Ubuntu: one directory per major version; the newest first.
  const versions = existsSync('/usr/lib/postgresql') ? readdirSync('/usr/lib/postgresql') : [];
  for (const version of versions.sort((a, b) => Number(b) - Number(a))) dirs.push(`/usr/lib/postgresql/${version}/bin`);
  dirs.push(...(process.env.PATH ?? '').split(':').filter((dir) => dir !== ''));
  return dirs;
}

/** The `postgres` OS user's ids, for a server started by root; a reason when there is none. */
function serverUser(): PostgresBinaries['user'] | string {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    return 'a `postgres` OS user to run the server as (PostgreSQL refuses to run as root)';
  }
}

/** Where the binaries are; or what is missing. */
function findBinaries(): PostgresBinaries | string {
  const bindir = candidateBindirs().find((dir) => SERVER_BINARIES.every((name) => existsSync(join(dir, name))));
  if (bindir === undefined) {
    return `the PostgreSQL server binaries (${SERVER_BINARIES.join(', ')}) in \`pg_config --bindir\`, /usr/lib/postgresql/*/bin or PATH (install the postgresql package)`;
  }
  const user = serverUser();
  return typeof user === 'string' ? user : { bindir, user };
}

/**
 * The binaries when present. Otherwise: under CI, throws (the file fails, naming what is missing); elsewhere,
 * warns and resolves undefined, for `describe.runIf(...)`.
 */
export async function requirePostgresBinaries(): Promise<PostgresBinaries | undefined> {
  const found = findBinaries();
  if (typeof found !== 'string') return found;
  const message = `a private PostgreSQL server cannot be made: missing ${found}`;
  if (process.env.CI) throw new Error(message);
  console.warn(`skipped: ${message}`);
  return undefined;
}

/** Creates, configures and starts a private server. */
export async function startPrivatePostgres({ bindir, user }: PostgresBinaries): Promise<PrivatePostgres> {
  const dir = mkdtempSync(join(tmpdir(), 'deadline-pg-'));
  if (user !== undefined) chownSync(dir, user.uid, user.gid);
  const data = join(dir, 'data');
  const log = join(dir, 'server.log');
  const port = await freePort();
  // As the server's user, from a directory it can read (pg_ctl and initdb complain about one they cannot).
  const as = { cwd: dir, ...(user ?? {}) };
  const pgCtl = (...args: string[]) => run(join(bindir, 'pg_ctl'), ['-D', data, ...args], as);
  const stopNow = () => {
    try {
      execFileSync(join(bindir, 'pg_ctl'), ['-D', data, '-m', 'immediate', '-w', 'stop'], { ...as, stdio: 'ignore' });
    } catch {
      // Not running (never started, or already stopped).
    }
  };
  // If the test process ends without destroy() (a crash), the server must not outlive it.
  const onExit = () => {
    stopNow();
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', onExit);
  const withLog = async (step: Promise<unknown>, what: string) => {
    try {
      await step;
    } catch (error) {
      const tail = existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-15).join('\n') : '';
      throw new Error(`private PostgreSQL: ${what} failed: ${(error as Error).message}\n${tail}`, { cause: error });
    }
  };
  const server: PrivatePostgres = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    stop: () => withLog(pgCtl('-m', 'fast', '-w', 'stop'), 'stop'),
    // `-l`: the server's output goes to a file, not to pg_ctl's pipe, which would keep this call waiting.
    start: () => withLog(pgCtl('-w', '-t', '30', '-l', log, 'start'), 'start'),
    async destroy() {
      process.off('exit', onExit);
      onExit();
    },
  };
  try {
    await withLog(
      run(
        join(bindir, 'initdb'),
        ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync'],
        as,
      ),
      'initdb',
    );
    appendFileSync(
      join(data, 'postgresql.conf'),
      [
        "listen_addresses = '127.0.0.1'",
        `port = ${port}`,
        `unix_socket_directories = '${dir}'`,
        // Nothing here must survive a crash: durability off, for a fast start and stop.
        'fsync = off',
        'synchronous_commit = off',
        'full_page_writes = off',
        'shared_buffers = 16MB',
        'max_connections = 40',
        '',
      ].join('\n'),
    );
    await server.start();
  } catch (error) {
    await server.destroy();
    throw error;
  }
  return server;
}
