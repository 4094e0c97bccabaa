/** The soak's private Redis: starts, keeps what was written across a restart (its append-only file), stops. */
import { spawnSync } from 'node:child_process';
import { Redis } from 'ioredis';
import { expect, it } from 'vitest';
import { redisServerBinary, startPrivateRedis } from '../src/redis-server.ts';

const runnable = spawnSync(redisServerBinary(), ['--version']).status === 0 || process.env.CI === 'true';
if (!runnable) console.warn(`skipped: no ${redisServerBinary()} (install Redis, or set REDIS_SERVER)`);

it.runIf(runnable)('a restart loses nothing written before it, on the same port', async () => {
  const server = await startPrivateRedis();
  const client = new Redis(server.url, { maxRetriesPerRequest: null });
  client.on('error', () => {});
  try {
    await client.rpush('jobs', 'a', 'b', 'c');
    await server.restart();
    expect(await client.lrange('jobs', 0, -1)).toEqual(['a', 'b', 'c']);
  } finally {
    client.disconnect();
    await server.stop();
  }
});

it('names the binary it could not run', async () => {
  const saved = process.env.REDIS_SERVER;
  process.env.REDIS_SERVER = '/nonexistent/redis-server';
  try {
    await expect(startPrivateRedis()).rejects.toThrow(/no \/nonexistent\/redis-server to run \(install Redis/);
  } finally {
    if (saved === undefined) delete process.env.REDIS_SERVER;
    else process.env.REDIS_SERVER = saved;
  }
});
