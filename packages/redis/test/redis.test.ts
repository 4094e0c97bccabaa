/**
 * @deadline/redis against the Redis running here: commands bounded, replies still matched after a timeout,
 * blocking commands bounded on the server and released when the request dies, nothing popped and lost.
 */
import { once } from 'node:events';
import { createServer } from 'node:net';
import { CancelledError, createContext, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import fastifyDeadline from '@deadline/fastify';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDIS, requireService } from '../../../test/support/services.ts';
import { loopStalls } from '../../../test/support/settle.ts';
import { withDeadline } from '../src/index.ts';
import { canRunRedisServer, type PrivateRedis, startRedisServer } from './redis-server.ts';

const available = await requireService(REDIS);
const privateServer = await canRunRedisServer();
/**
 * A cancelled BLPOP is no longer blocked on the server within this, at the 99th percentile, past the longest this
 * process stalled meanwhile (settle.ts).
 */
const UNBLOCKED_P99_MS = 500;

const clients: Redis[] = [];
function client(url = REDIS.url): Redis {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  clients.push(redis);
  return redis;
}
let admin: Redis;
let keyNumber = 0;
const key = () => `deadline:test:${process.pid}:${++keyNumber}`;

/** Ids of clients blocked right now (CLIENT LIST flag b). */
async function blockedIds(): Promise<Set<string>> {
  const list = (await admin.client('LIST')) as string;
  const ids = new Set<string>();
  for (const line of list.split('\n')) {
    const flags = /\bflags=(\S*)/.exec(line)?.[1] ?? '';
    if (flags.includes('b')) ids.add(/\bid=(\d+)/.exec(line)?.[1] as string);
  }
  return ids;
}

/** Asks (command after command, no sleeping) until `id` is blocked / no longer blocked; resolves when. */
async function until(id: string, blocked: boolean, limitMs = 5_000): Promise<number> {
  const end = performance.now() + limitMs;
  while (performance.now() < end) if ((await blockedIds()).has(id) === blocked) return performance.now();
  throw new Error(`client ${id} ${blocked ? 'never blocked' : 'still blocked'}`);
}

describe.runIf(available)('@deadline/redis (Redis)', () => {
  beforeAll(() => {
    admin = client();
  });
  afterAll(() => {
    for (const redis of clients) redis.disconnect();
  });

  it('outside a context: the client as it is', async () => {
    const redis = withDeadline(client());
    const k = key();
    await redis.set(k, 'v');
    expect(await redis.get(k)).toBe('v');
    expect(await redis.getBuffer(k)).toEqual(Buffer.from('v'));
  });

  it('no time left: DeadlineExceededError before-call, nothing written', async () => {
    const redis = withDeadline(client());
    const k = key();
    await redis.ping();
    const ctx = createContext({ root: true, deadline: 0.5 });
    const error = await ctx.run(() => redis.set(k, 'written?')).catch((e: unknown) => e);
    expect(error).toMatchObject({ phase: 'before-call' });
    expect(await admin.exists(k)).toBe(0);
    const pipelined = await ctx.run(() => redis.pipeline().set(k, 'x').exec()).catch((e: unknown) => e);
    expect(pipelined).toMatchObject({ phase: 'before-call' });
    expect(await admin.exists(k)).toBe(0);
  });

  it('BLPOP empty 0 under 300 ms: returns near 300 ms, nobody left blocked, a later element stays in the list', async () => {
    const raw = client();
    const redis = withDeadline(raw);
    const k = key();
    const id = String(await raw.client('ID'));
    const started = performance.now();
    // The server ends the wait by itself when its event loop next wakes (every 100 ms at the default hz 10), so
    // either it answers "nothing" (null) first or our deadline does — and releases the connection.
    const result = await runWithDeadline(300, () => redis.blpop(k, 0)).catch((e: unknown) => e);
    const elapsed = performance.now() - started;
    if (result !== null) expect(result).toBeInstanceOf(DeadlineExceededError);
    await until(id, false);
    expect(elapsed).toBeGreaterThanOrEqual(250);
    expect(elapsed).toBeLessThan(1_000);
    expect((await blockedIds()).has(id)).toBe(false);
    await admin.lpush(k, 'later');
    expect(await admin.lrange(k, 0, -1)).toEqual(['later']);
  });

  it('cancelled mid-BLPOP: released on the server fast (p50/p99 over 100 runs)', async () => {
    const raw = client();
    const redis = withDeadline(raw);
    const id = String(await raw.client('ID'));
    const k = key();
    const latencies: number[] = [];
    // Less the longest this process stalled meanwhile (its UNBLOCK and the poll that sees it wait alike).
    const pastStalls: number[] = [];
    const stalls = loopStalls();
    try {
      for (let i = 0; i < 100; i++) {
        const ctx = createContext({ root: true, deadline: 60_000 });
        const pending = ctx.run(() => redis.blpop(k, 0)).catch((e: unknown) => e);
        await until(id, true);
        const cancelledAt = performance.now();
        ctx.cancel(new CancelledError('client left', { reason: 'client-disconnected' }));
        expect(await pending).toBeInstanceOf(CancelledError);
        const unblockedAt = await until(id, false);
        latencies.push(unblockedAt - cancelledAt);
        pastStalls.push(unblockedAt - cancelledAt - stalls.longestBetween(cancelledAt, unblockedAt));
      }
    } finally {
      stalls.stop();
    }
    latencies.sort((a, b) => a - b);
    pastStalls.sort((a, b) => a - b);
    console.log(
      `redis unblock: cancel → client no longer blocked p50 ${latencies[49]?.toFixed(1)} ms, p99 ${latencies[98]?.toFixed(1)} ms (${pastStalls[98]?.toFixed(1)} ms less this process's stalls)`,
    );
    expect(pastStalls[98]).toBeLessThan(UNBLOCKED_P99_MS);
  }, 60_000);

  it('a racing LPUSH loses nothing over 1,000 rounds of cancelled BLPOPs', async () => {
    const raw = client();
    const redis = withDeadline(raw);
    const pusher = client();
    const id = String(await raw.client('ID'));
    let lost = 0;
    for (let i = 0; i < 1_000; i++) {
      const k = key();
      const ctx = createContext({ root: true, deadline: 60_000 });
      const pending = ctx.run(() => redis.blpop(k, 0)).catch((e: unknown) => e);
      if (i % 2 === 0) await until(id, true);
      // The element and the cancel race: popped and put back, or never popped.
      await Promise.all([pusher.lpush(k, `e${i}`), Promise.resolve().then(() => ctx.cancel('client left'))]);
      expect(await pending).toBeInstanceOf(CancelledError);
      // A popped element's return travels on the side connection: ask until it is back (or give up).
      const end = performance.now() + 2_000;
      let length = await admin.llen(k);
      while (length < 1 && performance.now() < end) length = await admin.llen(k);
      if (length !== 1) lost++;
      await admin.del(k);
    }
    expect(lost).toBe(0);
  }, 120_000);

  it('with a keyPrefix, a popped element goes back to its own key (not a doubly prefixed one)', async () => {
    const raw = new Redis(REDIS.url, { keyPrefix: `deadline:pfx:${process.pid}:` });
    clients.push(raw);
    const redis = withDeadline(raw);
    const full = (k: string) => `deadline:pfx:${process.pid}:${k}`;
    let lost = 0;
    for (let i = 0; i < 200; i++) {
      const k = `q${i}`;
      const ctx = createContext({ root: true, deadline: 60_000 });
      const pending = ctx.run(() => redis.blpop(k, 0)).catch((e: unknown) => e);
      await Promise.all([admin.lpush(full(k), `e${i}`), Promise.resolve().then(() => ctx.cancel('client left'))]);
      await pending;
      const end = performance.now() + 2_000;
      let length = await admin.llen(full(k));
      while (length < 1 && performance.now() < end) length = await admin.llen(full(k));
      if (length !== 1) lost++;
      await admin.del(full(k));
    }
    expect(lost).toBe(0);
    expect(await admin.keys(`deadline:pfx:${process.pid}:deadline:*`)).toEqual([]);
  });

  it('the client leaving the HTTP edge releases the blocked connection', async () => {
    const raw = client();
    const redis = withDeadline(raw);
    const id = String(await raw.client('ID'));
    const app = Fastify({ forceCloseConnections: true });
    await app.register(fastifyDeadline, { serviceName: 'orders' });
    app.get('/', async () => redis.blpop(key(), 0));
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const controller = new AbortController();
      const pending = request(url, { signal: controller.signal }).catch((e: unknown) => e);
      await until(id, true);
      controller.abort();
      await pending;
      const abortedAt = performance.now();
      expect((await until(id, false)) - abortedAt).toBeLessThan(1_000);
    } finally {
      await app.close();
    }
  });

  it('Redis unreachable: a command under a 200 ms budget fails at the budget, not after the retries', async () => {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as { port: number }).port;
    server.close();
    const down = new Redis({ port, host: '127.0.0.1', lazyConnect: false });
    down.on('error', () => {});
    clients.push(down);
    const redis = withDeadline(down);
    const started = performance.now();
    const error = await runWithDeadline(200, () => redis.get('x')).catch((e: unknown) => e);
    const elapsed = performance.now() - started;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(elapsed).toBeLessThan(1_500);
  });
});

// CLIENT PAUSE stops every client of the server: on a private one, so that no other test file running at the same
// time (on the shared server) is paused with it.
describe.runIf(available && privateServer)('@deadline/redis: a paused server (a private redis-server)', () => {
  let server: PrivateRedis;
  beforeAll(async () => {
    server = await startRedisServer();
  });
  afterAll(async () => {
    for (const redis of clients) redis.disconnect();
    await server?.stop();
  });

  it('CLIENT PAUSE, then GET under 200 ms: rejects near 200 ms; the next replies still match their commands', async () => {
    const redis = withDeadline(client(server.url));
    const [a, b] = [key(), key()];
    await redis.set(a, 'A');
    await redis.set(b, 'B');
    await server.admin.client('PAUSE', 2_000);
    try {
      const started = performance.now();
      const error = await runWithDeadline(200, () => redis.get(a)).catch((e: unknown) => e);
      const elapsed = performance.now() - started;
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(error).toMatchObject({ phase: 'during-call', target: 'redis GET' });
      expect(elapsed).toBeGreaterThanOrEqual(195);
      expect(elapsed).toBeLessThan(1_000);
      const next = redis.get(b);
      await server.admin.client('UNPAUSE');
      // The abandoned GET's reply comes first and is matched to it; ours is ours.
      expect(await next).toBe('B');
      expect(await runWithDeadline(1_000, () => redis.get(a))).toBe('A');
    } finally {
      await server.admin.client('UNPAUSE');
    }
  });

  it('a pipeline is bounded as a whole', async () => {
    const redis = withDeadline(client(server.url));
    const k = key();
    await server.admin.client('PAUSE', 2_000);
    try {
      const error = await runWithDeadline(150, () => redis.pipeline().set(k, '1').get(k).exec()).catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(DeadlineExceededError);
    } finally {
      await server.admin.client('UNPAUSE');
    }
  });
});
