/**
 * @deadline/redis on node-redis's cluster (`createCluster()`, three masters started by the test), pool
 * (`createClientPool()`) and Sentinel (`createSentinel()`, a master and a Sentinel started by the test), node-redis
 * 5 and 6: each client they hand out is bounded as a single client is, a blocked node connection is released on the
 * node that holds it, and the wait for the slot map or a free pool client ends with the request.
 */
import { CancelledError, createContext, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import type { Redis } from 'ioredis';
import {
  createClientPool as createClientPool6,
  createCluster as createCluster6,
  createSentinel as createSentinel6,
} from 'redis';
import {
  createClientPool as createClientPool5,
  createCluster as createCluster5,
  createSentinel as createSentinel5,
} from 'redis5';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDIS, requireService } from '../../../test/support/services.ts';
import { withDeadline } from '../src/index.ts';
import { clientList, percentile } from './connections.ts';
import { canStartCluster, startCluster, type TestCluster } from './redis-cluster.ts';
import { SENTINEL_MASTER, startSentinel, type TestSentinel } from './redis-sentinel.ts';

const clusterAvailable = await canStartCluster();
if (!clusterAvailable) {
  const message = 'redis-server and redis-cli are needed to start a test cluster (Debian package redis-server)';
  if (process.env.CI) throw new Error(message);
  console.warn(`skipped: ${message}`);
}
const redisAvailable = await requireService(REDIS);

const VERSIONS = [
  {
    label: 'node-redis 5',
    createCluster: createCluster5,
    createClientPool: createClientPool5,
    createSentinel: createSentinel5,
  },
  {
    label: 'node-redis 6',
    createCluster: createCluster6,
    createClientPool: createClientPool6,
    createSentinel: createSentinel6,
  },
] as const;

let keyNumber = 0;
const key = () => `deadline:topologies:${process.pid}:${++keyNumber}`;

/** Ids of the connections named `name` blocked right now, on any of `admins`, as `node:id`. */
async function blockedNamed(admins: Redis[], name: string): Promise<string[]> {
  const blocked: string[] = [];
  for (const [node, admin] of admins.entries()) {
    for (const line of await clientList(admin)) {
      if (line.name === name && line.flags.includes('b')) blocked.push(`${node}:${line.id}`);
    }
  }
  return blocked;
}

/** Asks until some connection named `name` is blocked (`true`) / none is (`false`); resolves when. */
async function untilBlocked(admins: Redis[], name: string, blocked: boolean, limitMs = 5_000): Promise<number> {
  const end = performance.now() + limitMs;
  while (performance.now() < end)
    if ((await blockedNamed(admins, name)).length > 0 === blocked) return performance.now();
  throw new Error(`${name} ${blocked ? 'never blocked' : 'still blocked'}`);
}

describe.runIf(clusterAvailable)('@deadline/redis on node-redis clusters (three masters)', () => {
  let testCluster: TestCluster;
  const closers: (() => unknown)[] = [];
  beforeAll(async () => {
    testCluster = await startCluster();
  }, 60_000);
  afterAll(async () => {
    for (const close of closers) await close();
    await testCluster?.stop();
  });

  for (const version of VERSIONS) {
    describe(version.label, () => {
      let nameNumber = 0;
      const open = async () => {
        const name = `deadline-topo-cluster-${process.pid}-${++nameNumber}`;
        const raw = (version.createCluster as typeof createCluster6)({
          rootNodes: testCluster.nodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })),
          defaults: { name },
        });
        raw.on('error', () => {});
        await raw.connect();
        closers.push(() => raw.destroy());
        return { cluster: withDeadline(raw, { name: 'cache' }), name };
      };

      it('commands, MULTI and pipelines are routed and bounded; without time left nothing is written', async () => {
        const { cluster } = await open();
        const k = key();
        await runWithDeadline(2_000, async () => {
          await cluster.set(k, 'a');
          expect(await cluster.get(k)).toBe('a');
          expect(await cluster.multi().set(k, 'b').get(k).exec()).toEqual(['OK', 'b']);
          expect(await cluster.multi().set(k, 'c').get(k).execAsPipeline()).toEqual(['OK', 'c']);
        });
        const ctx = createContext({ root: true, deadline: 0.5 });
        const attempts: (() => Promise<unknown>)[] = [
          () => cluster.set(k, 'written?'),
          () => cluster.multi().set(k, 'written?').exec(),
          () => cluster.multi().set(k, 'written?').execAsPipeline(),
        ];
        for (const attempt of attempts) {
          expect(await ctx.run(attempt).catch((e: unknown) => e)).toMatchObject({
            phase: 'before-call',
            target: expect.stringMatching(/^cache /),
          });
        }
        expect(await cluster.get(k)).toBe('c');
      });

      it('BLPOP 0 under 300 ms on keys of several masters: the deadline error, released on its node', async () => {
        const { cluster, name } = await open();
        for (let i = 0; i < 4; i++) {
          const error = await runWithDeadline(300, () => cluster.blPop(key(), 0)).catch((e: unknown) => e);
          expect(error).toBeInstanceOf(DeadlineExceededError);
          expect(error).toMatchObject({ target: 'cache BLPOP' });
          await untilBlocked(testCluster.admins, name, false, 1_000);
        }
      });

      it('cancelled mid-BLPOP (60 runs across the masters): released on the node that holds it; 300 races lose nothing', async () => {
        const { cluster, name } = await open();
        const latencies: number[] = [];
        for (let i = 0; i < 60; i++) {
          const ctx = createContext({ root: true, deadline: 60_000 });
          const pending = ctx.run(() => cluster.blPop(key(), 0)).catch((e: unknown) => e);
          await untilBlocked(testCluster.admins, name, true);
          const cancelledAt = performance.now();
          ctx.cancel(new CancelledError('client left', { reason: 'client-disconnected' }));
          expect(await pending).toBeInstanceOf(CancelledError);
          latencies.push((await untilBlocked(testCluster.admins, name, false)) - cancelledAt);
        }
        console.log(
          `${version.label} cluster unblock: p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms`,
        );
        const count = { lost: 0, duplicated: 0 };
        for (let i = 0; i < 300; i++) {
          const k = key();
          const ctx = createContext({ root: true, deadline: 60_000 });
          const pending = ctx.run(() => cluster.blPop(k, 0)).catch((e: unknown) => e);
          await Promise.all([cluster.lPush(k, `e${i}`), Promise.resolve().then(() => ctx.cancel('client left'))]);
          await pending;
          const end = performance.now() + 2_000;
          let length = await cluster.lLen(k);
          while (length < 1 && performance.now() < end) length = await cluster.lLen(k);
          if (length === 0) count.lost++;
          if (length > 1) count.duplicated++;
          await cluster.del(k);
        }
        expect(count).toEqual({ lost: 0, duplicated: 0 });
      }, 60_000);
    });
  }
});

describe.runIf(redisAvailable)('@deadline/redis on node-redis pools', () => {
  const closers: (() => unknown)[] = [];
  let admin: Redis;
  beforeAll(async () => {
    const { Redis } = await import('ioredis');
    admin = new Redis(REDIS.url);
  });
  afterAll(async () => {
    for (const close of closers) await close();
    admin.disconnect();
  });

  for (const version of VERSIONS) {
    describe(version.label, () => {
      let nameNumber = 0;
      const open = async (maximum: number) => {
        const name = `deadline-topo-pool-${process.pid}-${++nameNumber}`;
        const raw = (version.createClientPool as typeof createClientPool6)(
          { url: REDIS.url, name },
          { minimum: 1, maximum },
        );
        raw.on('error', () => {});
        await raw.connect();
        closers.push(() => raw.destroy());
        return { pool: withDeadline(raw, { name: 'pooled' }), name };
      };

      it('commands and batches are bounded; without time left nothing is written', async () => {
        const { pool } = await open(2);
        const k = key();
        await runWithDeadline(2_000, async () => {
          await pool.set(k, 'a');
          expect(await pool.get(k)).toBe('a');
          expect(await pool.multi().set(k, 'b').get(k).exec()).toEqual(['OK', 'b']);
        });
        const ctx = createContext({ root: true, deadline: 0.5 });
        // Refused by the command's own call, or — a moment's stall letting the deadline pass first — while it waited
        // for a pooled client: either way before anything was written.
        expect(await ctx.run(() => pool.set(k, 'written?')).catch((e: unknown) => e)).toMatchObject({
          phase: 'before-call',
          target: expect.stringMatching(/^pooled (SET|pool checkout)$/),
        });
        expect(await admin.get(k)).toBe('b');
      });

      it('waiting for a free client: the caller is answered at its deadline, and the command is never sent', async () => {
        const { pool, name } = await open(1);
        const q = key();
        const k = key();
        // The one client blocks (outside any request) until an element comes.
        const holder = pool.blPop(q, 0);
        await untilBlocked([admin], name, true);
        const started = performance.now();
        const error = await runWithDeadline(200, () => pool.set(k, 'too late')).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(DeadlineExceededError);
        expect(performance.now() - started).toBeLessThan(1_000);
        await admin.lpush(q, 'free it');
        expect(await holder).toEqual({ key: q, element: 'free it' });
        // The client is free again: a command now runs; the one given up earlier never did.
        expect(await runWithDeadline(2_000, () => pool.get(k))).toBeNull();
        expect(await admin.exists(k)).toBe(0);
      });

      it("BLPOP on a pool's client: released at the deadline and when cancelled; 200 races lose nothing", async () => {
        const { pool, name } = await open(1);
        const error = await runWithDeadline(300, () => pool.blPop(key(), 0)).catch((e: unknown) => e);
        expect(error).toMatchObject({ target: 'pooled BLPOP' });
        await untilBlocked([admin], name, false, 1_000);
        const count = { lost: 0, duplicated: 0 };
        for (let i = 0; i < 200; i++) {
          const k = key();
          const ctx = createContext({ root: true, deadline: 60_000 });
          const pending = ctx.run(() => pool.blPop(k, 0)).catch((e: unknown) => e);
          if (i % 2 === 0) await untilBlocked([admin], name, true);
          await Promise.all([admin.lpush(k, `e${i}`), Promise.resolve().then(() => ctx.cancel('client left'))]);
          expect(await pending).toBeInstanceOf(CancelledError);
          const end = performance.now() + 2_000;
          let length = await admin.llen(k);
          while (length < 1 && performance.now() < end) length = await admin.llen(k);
          if (length === 0) count.lost++;
          if (length > 1) count.duplicated++;
          await admin.del(k);
        }
        expect(count).toEqual({ lost: 0, duplicated: 0 });
      });
    });
  }
});

describe.runIf(clusterAvailable)('@deadline/redis on node-redis Sentinels (a master and one Sentinel)', () => {
  let testSentinel: TestSentinel;
  const closers: (() => unknown)[] = [];
  beforeAll(async () => {
    testSentinel = await startSentinel();
  }, 30_000);
  afterAll(async () => {
    for (const close of closers) await close();
    await testSentinel?.stop();
  });

  for (const version of VERSIONS) {
    describe(version.label, () => {
      let nameNumber = 0;
      const open = async () => {
        const name = `deadline-topo-sentinel-${process.pid}-${++nameNumber}`;
        const raw = (version.createSentinel as typeof createSentinel6)({
          name: SENTINEL_MASTER,
          sentinelRootNodes: [testSentinel.sentinel],
          nodeClientOptions: { name },
        });
        raw.on('error', () => {});
        await raw.connect();
        closers.push(() => raw.destroy());
        return { sentinel: withDeadline(raw, { name: 'primary' }), name };
      };

      it('commands and MULTI bounded, nothing written without time left; BLPOP released on the master, nothing lost', async () => {
        const { sentinel, name } = await open();
        const admin = testSentinel.master.admin;
        const k = key();
        await runWithDeadline(2_000, async () => {
          await sentinel.set(k, 'a');
          expect(await sentinel.get(k)).toBe('a');
          expect(await sentinel.multi().set(k, 'b').get(k).exec()).toEqual(['OK', 'b']);
        });
        const ctx = createContext({ root: true, deadline: 0.5 });
        expect(await ctx.run(() => sentinel.set(k, 'written?')).catch((e: unknown) => e)).toMatchObject({
          phase: 'before-call',
          target: expect.stringMatching(/^primary /),
        });
        expect(await admin.get(k)).toBe('b');
        const error = await runWithDeadline(300, () => sentinel.blPop(key(), 0)).catch((e: unknown) => e);
        expect(error).toMatchObject({ target: 'primary BLPOP' });
        await untilBlocked([admin], name, false, 1_000);
        const count = { lost: 0, duplicated: 0 };
        for (let i = 0; i < 100; i++) {
          const q = key();
          const race = createContext({ root: true, deadline: 60_000 });
          const pending = race.run(() => sentinel.blPop(q, 0)).catch((e: unknown) => e);
          if (i % 2 === 0) await untilBlocked([admin], name, true);
          await Promise.all([admin.lpush(q, `e${i}`), Promise.resolve().then(() => race.cancel('client left'))]);
          expect(await pending).toBeInstanceOf(CancelledError);
          const end = performance.now() + 2_000;
          let length = await admin.llen(q);
          while (length < 1 && performance.now() < end) length = await admin.llen(q);
          if (length === 0) count.lost++;
          if (length > 1) count.duplicated++;
        }
        expect(count).toEqual({ lost: 0, duplicated: 0 });
      }, 60_000);
    });
  }
});
