/**
 * One conformance suite for every Redis client `@deadline/redis` accepts (drivers.ts): each runs it from a file
 * of its own. What a service gets, whichever client it is on: commands bounded and not sent without time left,
 * replies still matched after a command was given up, blocking commands released on the server at the deadline
 * or disconnect and nothing they popped lost or doubled, batches, scripts and functions bounded, subscribers never
 * cut, duplicates bounded like their original, and a connection killed under it survived.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { inspect } from 'node:util';
import { CancelledError, createContext, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import fastifyDeadline from '@deadline/fastify';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { watchProcess } from '../../../../test/support/process-watch.ts';
import { REDIS, requireService } from '../../../../test/support/services.ts';
import { loopStalls } from '../../../../test/support/settle.ts';
import { withDeadline } from '../../src/index.ts';
import { idsNamed, killNamed, percentile, untilBlocked, untilNamed } from '../connections.ts';
import { canRunRedisServer, type PrivateRedis, startRedisServer } from '../redis-server.ts';
import type { OpenOptions, RedisDriver } from './drivers.ts';

/** A cancelled BLPOP is no longer blocked on the server within this at the 99th percentile, past this process's stalls. */
const UNBLOCKED_P99_MS = 500;

/**
 * How many rounds the counted tests run: all of them in the client's default protocol; in its other one, enough to
 * see each reply shape through (the private server's tests, which no reply shape changes, run once).
 */
const ROUNDS = {
  full: { cancels: 100, races: 1_000, zsetRaces: 200, privateServer: true },
  otherProtocol: { cancels: 30, races: 200, zsetRaces: 50, privateServer: false },
};

export function describeRedisConformance(driver: RedisDriver, options: { resp?: 2 | 3 } = {}): void {
  const protocol = options.resp === undefined ? 'its default protocol' : `RESP${options.resp}`;
  const rounds = options.resp === undefined ? ROUNDS.full : ROUNDS.otherProtocol;
  // Unique to this run, not only to this process: the shared server outlives a run, and a process id comes round
  // again (pid_max is 32,768 here), so a key a test left behind must never be one a later run starts from.
  const tag = `${driver.label.replace(/\W+/g, '-')}-${options.resp ?? 'd'}-${process.pid}-${randomUUID().slice(0, 8)}`;
  const opened: unknown[] = [];
  let nameNumber = 0;
  let keyNumber = 0;
  const key = () => `deadline:conformance:${tag}:${++keyNumber}`;
  /** A raw client of this driver, named for this test. */
  const open = async (more: OpenOptions = {}, url = REDIS.url) => {
    const name = `deadline-conf-${tag}-${++nameNumber}`;
    const raw = await driver.open(url, { name, resp: options.resp, ...more });
    opened.push(raw);
    return { raw, name, ops: driver.ops(raw) };
  };
  /** A wrapped client, its name and its ops. */
  const wrapped = async (more: OpenOptions = {}, url = REDIS.url) => {
    const { raw, name } = await open(more, url);
    const redis = withDeadline(raw as never);
    return { raw, redis, name, ops: driver.ops(redis) };
  };

  describe(`@deadline/redis on ${driver.label}, ${protocol}`, async () => {
    const available = await requireService(REDIS);
    const privateServer = await canRunRedisServer();
    let admin: Redis;
    let watch: ReturnType<typeof watchProcess>;
    beforeAll(() => {
      admin = new Redis(REDIS.url);
      watch = watchProcess();
    });
    afterAll(() => {
      watch.stop();
      for (const client of opened) driver.close(client);
      admin.disconnect();
      // Nothing uncaught, no unhandled rejection, in the whole suite.
      expect(watch.seen).toEqual([]);
    });

    describe.runIf(available)('on the shared server', () => {
      it("outside a context: the client as it is, its 'error' listeners untouched", async () => {
        const { raw, ops: rawOps } = await open();
        const before = rawOps.errorListeners();
        const { ops } = { ops: driver.ops(withDeadline(raw as never)) };
        expect(rawOps.errorListeners()).toBe(before);
        const k = key();
        await ops.set(k, 'v');
        expect(await ops.get(k)).toBe('v');
        await admin.rpush(`${k}:q`, 'e');
        expect(await ops.blpop(`${k}:q`, 0)).toEqual([`${k}:q`, 'e']);
      });

      it('no time left: DeadlineExceededError before-call, nothing written (command, MULTI, pipeline, EVAL)', async () => {
        const { ops } = await wrapped();
        const k = key();
        const ctx = createContext({ root: true, deadline: 0.5 });
        for (const attempt of [
          () => ops.set(k, 'written?'),
          () => ops.multiSetGet(k, 'written?'),
          () => ops.pipelineSetGet(k, 'written?'),
          () => ops.evalGet(k),
        ]) {
          const error = await ctx.run(attempt).catch((e: unknown) => e);
          expect(error).toBeInstanceOf(DeadlineExceededError);
          expect(error).toMatchObject({ phase: 'before-call' });
        }
        expect(await admin.exists(k)).toBe(0);
      });

      it('with time left: commands, MULTI, pipelines, EVAL and functions answer as without the wrapper', async () => {
        const { ops } = await wrapped();
        const k = key();
        const library = `deadline_conf_${tag.replace(/-/g, '_')}`;
        await admin.call(
          'FUNCTION',
          'LOAD',
          'REPLACE',
          `#!lua name=${library}\nredis.register_function('${library}_get', function(keys) return redis.call('GET', keys[1]) end)`,
        );
        await runWithDeadline(2_000, async () => {
          await ops.set(k, 'a');
          expect(await ops.get(k)).toBe('a');
          expect(await ops.multiSetGet(k, 'b')).toBe('b');
          expect(await ops.pipelineSetGet(k, 'c')).toBe('c');
          expect(await ops.evalGet(k)).toBe('c');
          expect(await ops.fcall(`${library}_get`, k)).toBe('c');
        });
        await admin.call('FUNCTION', 'DELETE', library);
      });

      it('a duplicate is bounded as its original', async () => {
        const { ops } = await wrapped();
        const copy = await ops.duplicate();
        opened.push(copy);
        const copyOps = driver.ops(copy);
        const error = await runWithDeadline(0.5, () => copyOps.get(key())).catch((e: unknown) => e);
        expect(error).toMatchObject({ phase: 'before-call' });
        expect(await runWithDeadline(2_000, () => copyOps.set(key(), 'x'))).toBe('OK');
      });

      it('BLPOP 0 under 300 ms: the deadline error at 300 ms naming the command, nobody left blocked', async () => {
        const { ops, name } = await wrapped();
        const k = key();
        const [id] = await idsNamed(admin, name);
        const started = performance.now();
        const error = await runWithDeadline(300, () => ops.blpop(k, 0)).catch((e: unknown) => e);
        const elapsed = performance.now() - started;
        expect(error, inspect(error)).toBeInstanceOf(DeadlineExceededError);
        expect(error).toMatchObject({ target: 'redis BLPOP', phase: 'during-call' });
        expect(elapsed).toBeGreaterThanOrEqual(295);
        expect(elapsed).toBeLessThan(1_500);
        // Released on the server right after the caller is answered.
        expect((await untilBlocked(admin, id as string, false, 1_000)) - started - elapsed).toBeLessThan(1_000);
        await admin.lpush(k, 'later');
        expect(await admin.lrange(k, 0, -1)).toEqual(['later']);
        await admin.del(k);
      });

      it('XREAD BLOCK, BLMOVE, BZPOPMIN and WAIT under 200 ms: each the deadline error naming it, released', async () => {
        const { ops, name } = await wrapped();
        const [id] = await idsNamed(admin, name);
        const k = key();
        await admin.xadd(k, '*', 'f', 'v');
        const cases: [string, () => Promise<unknown>][] = [
          ['redis XREAD', () => ops.xreadBlock(k, 0)],
          ['redis BLMOVE', () => ops.blmove(key(), key(), 0)],
          ['redis BZPOPMIN', () => ops.bzpopmin(key(), 0)],
          ['redis WAIT', () => ops.wait(1, 0)],
        ];
        for (const [target, blocking] of cases) {
          const error = await runWithDeadline(200, blocking).catch((e: unknown) => e);
          expect(error, target).toBeInstanceOf(DeadlineExceededError);
          expect(error).toMatchObject({ target });
          await untilBlocked(admin, id as string, false);
        }
      });

      it("a blocking command's own timeout within the budget: its own null reply, never the deadline error", async () => {
        const { ops } = await wrapped();
        for (let i = 0; i < 3; i++) {
          const started = performance.now();
          expect(await runWithDeadline(5_000, () => ops.blpop(key(), 0.1))).toBeNull();
          expect(performance.now() - started).toBeGreaterThanOrEqual(99);
          expect(await runWithDeadline(5_000, () => ops.xreadBlock(key(), 100))).toBeNull();
        }
      });

      it(`cancelled mid-BLPOP: released on the server fast (p50/p99 over ${rounds.cancels} runs)`, async () => {
        const { ops, name } = await wrapped();
        const [id] = (await idsNamed(admin, name)) as [string];
        const k = key();
        const latencies: number[] = [];
        const pastStalls: number[] = [];
        const stalls = loopStalls();
        try {
          for (let i = 0; i < rounds.cancels; i++) {
            const ctx = createContext({ root: true, deadline: 60_000 });
            const pending = ctx.run(() => ops.blpop(k, 0)).catch((e: unknown) => e);
            await untilBlocked(admin, id, true);
            const cancelledAt = performance.now();
            ctx.cancel(new CancelledError('client left', { reason: 'client-disconnected' }));
            expect(await pending).toBeInstanceOf(CancelledError);
            const unblockedAt = await untilBlocked(admin, id, false);
            latencies.push(unblockedAt - cancelledAt);
            pastStalls.push(unblockedAt - cancelledAt - stalls.longestBetween(cancelledAt, unblockedAt));
          }
        } finally {
          stalls.stop();
        }
        console.log(
          `${driver.label} (${protocol}) unblock: cancel → no longer blocked p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms (${percentile(pastStalls, 99).toFixed(1)} ms less this process's stalls)`,
        );
        expect(percentile(pastStalls, 99)).toBeLessThan(UNBLOCKED_P99_MS);
      }, 60_000);

      it(`${rounds.races} cancel/push races on BLPOP (and ${rounds.zsetRaces} on BZPOPMIN): none lost, none duplicated`, async () => {
        const { ops, name } = await wrapped();
        const [id] = (await idsNamed(admin, name)) as [string];
        const count = { lost: 0, duplicated: 0 };
        const race = async (i: number, pop: (k: string) => Promise<unknown>, push: (k: string) => Promise<unknown>) => {
          const k = key();
          const ctx = createContext({ root: true, deadline: 60_000 });
          const pending = ctx.run(() => pop(k)).catch((e: unknown) => e);
          if (i % 2 === 0) await untilBlocked(admin, id, true);
          await Promise.all([push(k), Promise.resolve().then(() => ctx.cancel('client left'))]);
          expect(await pending).toBeInstanceOf(CancelledError);
          // A popped element goes back on the side connection: asked until it is there (or given up).
          const size = async () =>
            Number(
              await admin.call(
                'EVAL',
                "return redis.call('TYPE', KEYS[1]).ok == 'zset' and redis.call('ZCARD', KEYS[1]) or redis.call('LLEN', KEYS[1])",
                1,
                k,
              ),
            );
          const end = performance.now() + 2_000;
          let length = await size();
          while (length < 1 && performance.now() < end) length = await size();
          if (length === 0) count.lost++;
          if (length > 1) count.duplicated++;
          await admin.del(k);
        };
        for (let i = 0; i < rounds.races; i++)
          await race(
            i,
            (k) => ops.blpop(k, 0),
            (k) => admin.lpush(k, `e${i}`),
          );
        for (let i = 0; i < rounds.zsetRaces; i++)
          await race(
            i,
            (k) => ops.bzpopmin(k, 0),
            (k) => admin.zadd(k, i + 0.5, `m${i}`),
          );
        console.log(`${driver.label} (${protocol}) races: ${JSON.stringify(count)}`);
        expect(count).toEqual({ lost: 0, duplicated: 0 });
      }, 120_000);

      it.runIf(driver.keyPrefix)(
        'with a keyPrefix, a popped element goes back to its own key, not a doubly prefixed one',
        async () => {
          const prefix = `deadline:pfx:${tag}:`;
          const { ops } = await wrapped({ keyPrefix: prefix });
          let lost = 0;
          for (let i = 0; i < 200; i++) {
            const k = `q${i}`;
            const ctx = createContext({ root: true, deadline: 60_000 });
            const pending = ctx.run(() => ops.blpop(k, 0)).catch((e: unknown) => e);
            await Promise.all([
              admin.lpush(prefix + k, `e${i}`),
              Promise.resolve().then(() => ctx.cancel('client left')),
            ]);
            await pending;
            const end = performance.now() + 2_000;
            let length = await admin.llen(prefix + k);
            while (length < 1 && performance.now() < end) length = await admin.llen(prefix + k);
            if (length !== 1) lost++;
            await admin.del(prefix + k);
          }
          expect(lost).toBe(0);
          expect(await admin.keys(`${prefix}${prefix}*`)).toEqual([]);
        },
      );

      it('Redis unreachable: a command under a 200 ms budget fails at the budget, never queued for later', async () => {
        const server = createServer();
        server.listen(0, '127.0.0.1');
        await once(server, 'listening');
        const port = (server.address() as { port: number }).port;
        server.close();
        const down = driver.openDown(`redis://127.0.0.1:${port}`);
        opened.push(down);
        const ops = driver.ops(withDeadline(down as never));
        const started = performance.now();
        const errors = await Promise.all(
          Array.from({ length: 12 }, () => runWithDeadline(200, () => ops.get('x')).catch((e: unknown) => e)),
        );
        for (const error of errors) expect(error).toBeInstanceOf(DeadlineExceededError);
        expect(performance.now() - started).toBeLessThan(1_500);
      });

      it('a subscriber subscribed inside a request is never cut: messages still come after its deadline', async () => {
        const { ops: subscriber } = await wrapped();
        const { ops: publisher } = await wrapped();
        const channel = key();
        const messages: string[] = [];
        let received = () => {};
        await runWithDeadline(100, () =>
          subscriber.subscribe(channel, (message) => {
            messages.push(message);
            received();
          }),
        );
        // The request's budget runs out (the work under test), then a message is published.
        await runWithDeadline(100, () => new Promise((resolve) => setTimeout(resolve, 200))).catch(() => {});
        const arrived = new Promise<void>((resolve) => {
          received = resolve;
        });
        await publisher.publish(channel, 'after the deadline');
        await arrived;
        expect(messages).toEqual(['after the deadline']);
      });

      it("at the HTTP edge: the request's deadline answers 504 naming this hop; the client leaving releases the connection", async () => {
        const { ops, name } = await wrapped();
        const [id] = (await idsNamed(admin, name)) as [string];
        const app = Fastify({ forceCloseConnections: true });
        await app.register(fastifyDeadline, { serviceName: 'orders' });
        app.get('/', async () => ops.blpop(key(), 0));
        const url = await app.listen({ port: 0, host: '127.0.0.1' });
        try {
          const timedOut = await request(url, { headers: { 'x-request-deadline': '300' } });
          await timedOut.body.dump();
          expect(timedOut.statusCode).toBe(504);
          expect(timedOut.headers['x-deadline-exceeded-by']).toBe('orders');
          await untilBlocked(admin, id, false, 1_000);
          const controller = new AbortController();
          const pending = request(url, { signal: controller.signal }).catch((e: unknown) => e);
          await untilBlocked(admin, id, true);
          controller.abort();
          await pending;
          const abortedAt = performance.now();
          expect((await untilBlocked(admin, id, false)) - abortedAt).toBeLessThan(1_000);
        } finally {
          await app.close();
        }
      });

      it('its connection killed (CLIENT KILL), idle and while BLPOP blocks: no crash, the call ends by its deadline, back within a second', async () => {
        const { ops, name } = await wrapped({ quickReconnect: true });
        const k = key();
        await ops.set(k, 'v');
        const stalls = loopStalls();
        const [before] = await killNamed(admin, name);
        const killedAt = performance.now();
        await untilNamed(admin, name, [before as string]);
        let value: unknown;
        while (value !== 'v') value = await runWithDeadline(300, () => ops.get(k)).catch((e: unknown) => e);
        // Within a second, less what this process stalled meanwhile (the fault suite judges the rate beside a twin).
        const backAt = performance.now();
        stalls.stop();
        expect(backAt - killedAt - stalls.longestBetween(killedAt, backAt)).toBeLessThan(1_000);
        const [id] = (await idsNamed(admin, name)) as [string];
        const started = performance.now();
        const pending = runWithDeadline(500, () => ops.blpop(key(), 0)).catch((e: unknown) => e);
        await untilBlocked(admin, id, true);
        await killNamed(admin, name);
        const outcome = await pending;
        expect(performance.now() - started).toBeLessThan(500 + 1_000);
        // Ended by the deadline (ioredis sends it again on the new connection) or by the client's own error at the
        // drop (node-redis rejects what was in flight): never a hang, never an element.
        expect(outcome).toBeInstanceOf(Error);
        expect(await runWithDeadline(2_000, () => ops.get(k))).toBe('v');
      });
    });

    describe.runIf(available && privateServer && rounds.privateServer)('on a private server', () => {
      let server: PrivateRedis;
      beforeAll(async () => {
        server = await startRedisServer();
      });
      afterAll(async () => {
        await server?.stop();
      });

      it('CLIENT PAUSE, then GET and a pipeline under 200 ms: each rejects at 200 ms; the next replies still match', async () => {
        const { ops } = await wrapped({}, server.url);
        const [a, b] = [key(), key()];
        await ops.set(a, 'A');
        await ops.set(b, 'B');
        // Long enough for both calls below (about 350 ms) however the machine stalls; ended early by UNPAUSE.
        await server.admin.client('PAUSE', 1_200);
        try {
          const started = performance.now();
          const error = await runWithDeadline(200, () => ops.get(a)).catch((e: unknown) => e);
          const elapsed = performance.now() - started;
          expect(error).toMatchObject({ phase: 'during-call', target: 'redis GET' });
          expect(elapsed).toBeGreaterThanOrEqual(195);
          expect(elapsed).toBeLessThan(1_000);
          const batch = await runWithDeadline(150, () => ops.pipelineSetGet(a, 'X')).catch((e: unknown) => e);
          expect(batch).toBeInstanceOf(DeadlineExceededError);
          const next = ops.get(b);
          await server.admin.client('UNPAUSE');
          expect(await next).toBe('B');
          expect(await runWithDeadline(1_000, () => ops.get(a))).toBe('X');
        } finally {
          await server.admin.client('UNPAUSE');
        }
      });

      it('the server restarted: a call while it is down fails by its deadline, not sent later; calls succeed within a second of its return', async () => {
        const { ops } = await wrapped({ quickReconnect: true }, server.url);
        const k = key();
        let failed: unknown;
        const stalls = loopStalls();
        const { upAt } = await server.restart(async () => {
          // Once the client has seen the drop (a command written before it did is the client's to answer, or to
          // send again on the new connection: "maybe done"), a call fails by its deadline and is never sent.
          let probe: unknown;
          for (let i = 0; i < 10 && !(probe instanceof DeadlineExceededError); i++) {
            probe = await runWithDeadline(300, () => ops.get(`${k}:probe`)).catch((e: unknown) => e);
          }
          const started = performance.now();
          failed = await runWithDeadline(300, () => ops.set(k, 'sent while down')).catch((e: unknown) => e);
          expect(performance.now() - started).toBeLessThan(300 + 500);
        });
        expect(failed).toBeInstanceOf(DeadlineExceededError);
        let value: unknown;
        while (value !== 'OK')
          value = await runWithDeadline(300, () => ops.set(`${k}:up`, 'x')).catch((e: unknown) => e);
        const backAt = performance.now();
        stalls.stop();
        expect(backAt - upAt - stalls.longestBetween(upAt, backAt)).toBeLessThan(1_000);
        // The command given up while the server was away was never sent when it came back.
        expect(await server.admin.exists(k)).toBe(0);
      });
    });
  });
}
