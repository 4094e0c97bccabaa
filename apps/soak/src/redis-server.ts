/**
 * A Redis server of the soak's own, so restarting it disturbs nothing else on the machine: `redis-server` on a
 * free loopback port, its data in a temporary directory, with an append-only file synced on every write — as a
 * Redis that BullMQ's jobs live in is run, so that a restart loses no acknowledged job (the soak checks that none
 * is lost; a Redis without persistence would lose them all, whatever the clients did).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '@deadline/demo/embedded-postgres';

/** A running private Redis. */
export interface PrivateRedis {
  url: string;
  port: number;
  /** Stops it (SIGTERM: Redis syncs its file and exits) and starts it again on the same port and data. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The binary: `REDIS_SERVER` if set, else `redis-server` on the PATH.
 *
 * @example
 * ```ts
 * spawnSync(redisServerBinary(), ['--version']).status === 0; // can the soak run here?
 * ```
 */
export const redisServerBinary = () => process.env.REDIS_SERVER ?? 'redis-server';

/**
 * Starts a private Redis; rejects with a one-line reason (no binary, did not start within 10 s).
 *
 * @example
 * ```ts
 * const redis = await startPrivateRedis();
 * await redis.restart();
 * await redis.stop();
 * ```
 */
export async function startPrivateRedis(): Promise<PrivateRedis> {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-soak-redis-'));
  let port: number;
  let child: ChildProcess;
  try {
    port = await freePort();
    child = await launch(dir, port);
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async restart() {
      await stop(child);
      child = await launch(dir, port);
    },
    async stop() {
      await stop(child);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

async function launch(dir: string, port: number): Promise<ChildProcess> {
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', ''];
  args.push('--appendonly', 'yes', '--appendfsync', 'always', '--maxmemory-policy', 'noeviction');
  const child = spawn(redisServerBinary(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`Redis did not start within 10 s: ${last(output)}`)), 10_000);
    child.stdout?.on('data', (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-4_000);
      if (output.includes('Ready to accept connections')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-4_000);
    });
    child.once('error', (error: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      reject(
        new Error(
          error.code === 'ENOENT'
            ? `no ${redisServerBinary()} to run (install Redis, or set REDIS_SERVER to its redis-server)`
            : `cannot run ${redisServerBinary()}: ${error.message}`,
        ),
      );
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`Redis exited (${code ?? signal}) before it was ready: ${last(output)}`));
    });
  });
  try {
    await ready;
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  // Its output after that is not read; drained so a full pipe never blocks it.
  child.stdout?.resume();
  child.stderr?.resume();
  return child;
}

const last = (output: string) => output.trim().split('\n').at(-1) ?? 'no output';

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  await exited;
}
