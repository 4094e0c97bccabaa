/**
 * A real Sentinel for the tests: a private master (redis-server.ts) and one Sentinel watching it (quorum 1),
 * started from the `redis-server` on this machine in a temporary directory (a Sentinel rewrites its own
 * configuration file) and torn down afterwards.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { adminOf, freePorts, killAll, type PrivateRedis, startRedisServer } from './redis-server.ts';

export const SENTINEL_MASTER = 'deadline-master';

export interface TestSentinel {
  master: PrivateRedis;
  sentinel: { host: string; port: number };
  stop(): Promise<void>;
}

/** Starts a master and a Sentinel that knows it; resolves once the Sentinel names the master. */
export async function startSentinel(): Promise<TestSentinel> {
  const master = await startRedisServer();
  const dir = await mkdtemp(join(tmpdir(), 'deadline-redis-sentinel-'));
  const [port] = (await freePorts(1)) as [number];
  const conf = join(dir, 'sentinel.conf');
  await writeFile(
    conf,
    [
      `port ${port}`,
      'bind 127.0.0.1',
      `sentinel monitor ${SENTINEL_MASTER} 127.0.0.1 ${master.port} 1`,
      `sentinel down-after-milliseconds ${SENTINEL_MASTER} 60000`,
      '',
    ].join('\n'),
  );
  // The same binary, its configuration file first.
  const sentinel = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  let admin: Redis | undefined;
  const stop = async () => {
    admin?.disconnect();
    await killAll([sentinel]);
    await rm(dir, { recursive: true, force: true });
    await master.stop();
  };
  try {
    admin = await adminOf(port);
    const end = performance.now() + 10_000;
    while (!Array.isArray(await admin.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', SENTINEL_MASTER))) {
      if (performance.now() > end) throw new Error('the test Sentinel never named its master');
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return { master, sentinel: { host: '127.0.0.1', port }, stop };
}
