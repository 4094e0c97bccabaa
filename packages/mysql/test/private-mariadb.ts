/**
 * A MariaDB server of a test's own, for faults the shared one must never see (a restart, a failover): this
 * machine's `mariadbd`, on an empty data directory of its own in a temporary directory (no install step: with
 * `--skip-grant-tables` it needs no system tables), on a free port of 127.0.0.1, with its socket in that
 * directory. It is ready in well under a second; `destroy()` stops it and removes the directory, and a test
 * process that ends without calling it takes the server down with it.
 *
 * A missing binary follows services.ts: under `CI=true` the test file fails, naming it; elsewhere its tests are
 * skipped with a message.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants, mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ConnectionOptions } from 'mysql2/promise';

/** Where Debian, RPM and tarball installs put the server, after PATH. */
const SBIN_DIRS = ['/usr/sbin', '/usr/local/sbin', '/usr/local/mysql/bin'];

/** The line the server writes once it accepts connections. */
const READY = /ready for connections/;

/** The `mariadbd` binary's path, if this machine has one. */
function findServer(): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(':').filter((dir) => dir !== ''), ...SBIN_DIRS];
  for (const dir of dirs) {
    const path = join(dir, 'mariadbd');
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // Not here: the next directory.
    }
  }
  return undefined;
}

/**
 * The server binary when present. Otherwise: under CI, throws (the file fails, naming what is missing);
 * elsewhere, warns and resolves undefined, for `describe.runIf(...)`.
 */
export function requireMariadbd(): string | undefined {
  const found = findServer();
  if (found !== undefined) return found;
  const message = `a private MariaDB server cannot be made: no mariadbd on PATH or in ${SBIN_DIRS.join(', ')} (install mariadb-server)`;
  if (process.env.CI) throw new Error(message);
  console.warn(`skipped: ${message}`);
  return undefined;
}

/** A port of 127.0.0.1 that nothing listens on at the moment of asking. */
async function unusedPort(): Promise<number> {
  const probe = createServer().listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const { port } = probe.address() as AddressInfo;
  probe.close();
  await once(probe, 'close');
  return port;
}

/** A private server: how to reach it, and how to stop, restart and remove it. */
export class PrivateMariadb {
  readonly port: number;
  /** How long the last start took, from spawning the process to its first accepted connection (ms). */
  startedInMs = 0;
  readonly #binary: string;
  readonly #dir: string;
  #process: ChildProcess | undefined;
  /** The last lines the server wrote, for the error when it fails to start. */
  #log = '';
  readonly #onExit = () => this.#process?.kill('SIGKILL');

  private constructor(binary: string, dir: string, port: number) {
    this.#binary = binary;
    this.#dir = dir;
    this.port = port;
  }

  /** Makes and starts a server with `binary` (see {@link requireMariadbd}). */
  static async start(binary: string): Promise<PrivateMariadb> {
    const server = new PrivateMariadb(binary, mkdtempSync(join(tmpdir(), 'deadline-mariadb-')), await unusedPort());
    // If the test process ends without destroy() (a crash), the server must not outlive it.
    process.once('exit', server.#onExit);
    try {
      await server.#start();
    } catch (error) {
      await server.destroy();
      throw error;
    }
    return server;
  }

  /** Options for a mysql2 connection straight to the server (no database: the server has none but its own). */
  options(): ConnectionOptions {
    return { host: '127.0.0.1', port: this.port, user: 'root' };
  }

  /**
   * Stops the server (SIGTERM: every session is closed, as in a restart or a failover) and starts it again on the
   * same directory and port: a new run, whose connection ids start again from the bottom. Resolves once the new
   * run accepts connections.
   */
  async restart(): Promise<void> {
    await this.stop();
    await this.#start();
  }

  /** Stops the server; resolves once its process has exited. */
  async stop(): Promise<void> {
    const child = this.#process;
    if (child === undefined) return;
    this.#process = undefined;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    await exited;
  }

  /** Stops the server at once and removes its directory. Safe to call twice, or after a failed start. */
  async destroy(): Promise<void> {
    process.off('exit', this.#onExit);
    const child = this.#process;
    this.#process = undefined;
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    }
    rmSync(this.#dir, { recursive: true, force: true });
  }

  /** Spawns the server; resolves when it says it accepts connections, rejects with its output if it exits first. */
  async #start(): Promise<void> {
    const spawnedAt = performance.now();
    const dir = this.#dir;
    const child = spawn(
      this.#binary,
      [
        '--no-defaults', // nothing from this machine's my.cnf: not its port, socket or data directory
        `--datadir=${dir}`,
        `--port=${this.port}`,
        `--socket=${join(dir, 'sock')}`,
        `--pid-file=${join(dir, 'pid')}`,
        // Its own: a server deletes every `#sql…` file in its tmpdir when it starts, and in the shared /tmp those
        // are the temporary tables of the servers running beside it (CI: "Error on delete of
        // '/tmp/#sql-temptable-….MAI'" on a processlist query, while a standby started).
        `--tmpdir=${dir}`,
        '--bind-address=127.0.0.1',
        '--user=root', // run as root, which mariadbd otherwise refuses
        '--skip-grant-tables', // no system tables to make: everyone is root, and KILL needs no privilege
        '--skip-name-resolve',
        '--innodb-buffer-pool-size=8M',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    this.#process = child;
    this.#log = '';
    const exited = once(child, 'exit').then(([code, signal]) => {
      throw new Error(`private MariaDB exited while starting (${signal ?? code}):\n${this.#log}`);
    });
    const ready = new Promise<void>((resolve) => {
      // Without --log-error the server writes its log to stderr.
      child.stderr?.setEncoding('utf8');
      child.stderr?.on('data', (chunk: string) => {
        this.#log = (this.#log + chunk).split('\n').slice(-20).join('\n');
        if (READY.test(this.#log)) resolve();
      });
    });
    exited.catch(() => {}); // read only while starting; an exit later is stop()'s or destroy()'s
    await Promise.race([ready, exited]);
    this.startedInMs = performance.now() - spawnedAt;
  }
}
