/**
 * The fault suite every client runs (one file per client beside the conformance suite's): connections dropped by
 * the server (`CLIENT KILL`, on the shared server, of the test's own connections only, found by the names it gave
 * them) and a server restarted (a private one). For each fault: the process lives (nothing uncaught, no unhandled
 * rejection), calls in flight end by their deadline — with their reply (ioredis sends again what a dropped
 * connection left unanswered), with the client's own error (node-redis rejects it at the drop) or the deadline
 * error — calls succeed again within a second at the rate they had before, nothing popped is lost, and no UNBLOCK
 * reaches a command it was not sent for. What only ioredis does (a command re-sent on the new connection, its side
 * connection's own options) is in faults.test.ts.
 *
 * The pusher pauses around each kill and the list is drained first: an element popped by the server in the same
 * event-loop iteration as the kill dies with the connection before a byte of it is written (Redis's own
 * behaviour, with or without this package), and would be counted as lost here.
 */
import { CancelledError, createContext, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { expectEachTestLives } from '../../../../test/support/process-watch.ts';
import { REDIS, requireService } from '../../../../test/support/services.ts';
import { type SteadyLoad, steadyLoad } from '../../../../test/support/steady-load.ts';
import { withDeadline } from '../../src/index.ts';
import { killNamed, untilNamed } from '../connections.ts';
import {
  between,
  errorsOf,
  expectClearAndBounded,
  expectNoneLost,
  expectRecovered,
  pusherOf,
  until,
} from '../fault-checks.ts';
import { canRunRedisServer, type PrivateRedis, startRedisServer } from '../redis-server.ts';
import type { RedisDriver } from './drivers.ts';

export function describeFaults(driver: RedisDriver): void {
  const tag = `${driver.label.replace(/\W+/g, '-')}-${process.pid}`;
  const opened: unknown[] = [];
  /** Errors the app's own `'error'` handlers saw (needed with either client, without this package too). */
  const clientErrors: string[] = [];
  let nameNumber = 0;
  let keyNumber = 0;
  const key = () => `deadline:faults:${tag}:${++keyNumber}`;
  /** A bounded client named for this test, with the app's own `'error'` handler, as any app must have. */
  const named = async (url = REDIS.url) => {
    const name = `deadline-faults-${tag}-${++nameNumber}`;
    const raw = await driver.open(url, { name, onError: (error) => clientErrors.push(error.message) });
    opened.push(raw);
    return { name, ops: driver.ops(withDeadline(raw as never)) };
  };
  let admin: Redis;

  describe(`@deadline/redis on ${driver.label}: faults`, async () => {
    const available = await requireService(REDIS);
    const privateServer = await canRunRedisServer();
    beforeAll(() => {
      admin = new Redis(REDIS.url);
    });
    afterAll(() => {
      for (const client of opened) driver.close(client);
      admin.disconnect();
    });
    // Nothing may reach the process during any of these tests.
    expectEachTestLives();

    describe.runIf(available)('connections dropped by the server', () => {
      /**
       * A command load and a blocking one on two named clients: INCRs under 200 ms, and BLPOPs with their own 50 ms
       * timeout under 300 ms (null at 50 ms, or an element a pusher put there). `start()` makes a fresh pair.
       */
      async function commandLoads() {
        const { name: plainName, ops: redis } = await named();
        const { name: blockingName, ops: queue } = await named();
        const counter = key();
        const q = key();
        const pusher = pusherOf(admin, q);
        const popped: string[] = [];
        const commands = () => steadyLoad(3, () => runWithDeadline(200, () => redis.incr(counter)));
        const pops = () =>
          steadyLoad(2, async () => {
            const result = await runWithDeadline(300, () => queue.blpop(q, 0.05));
            if (result !== null) popped.push(result[1]);
          });
        return { names: [plainName, blockingName], q, pusher, popped, start: () => [commands(), pops()] };
      }

      it('the command connections killed twice under load and once idle: calls end in time and come back at their rate', async () => {
        const subject = await commandLoads();
        const { pusher, q, popped } = subject;
        // Its twin: the same loads on clients of their own, never killed.
        const twin = await commandLoads();
        const twins = twin.start();
        const kill = async (load: SteadyLoad[]) => {
          await pusher.pause();
          const killedAt = performance.now();
          const killed: string[] = [];
          for (const name of subject.names) killed.push(...(await killNamed(admin, name)));
          pusher.resume();
          expect(killed).toHaveLength(2);
          await Promise.all([...load, ...twins].map((l) => until(l, killedAt + 1_000)));
          return killedAt;
        };
        const summary: string[] = [];
        try {
          const loads = subject.start();
          const startedAt = performance.now();
          await Promise.all([...loads, ...twins].map((l) => until(l, startedAt + 1_000)));
          const killedAt: number[] = [];
          for (let i = 0; i < 2; i++) killedAt.push(await kill(loads));
          await Promise.all(loads.map((l) => l.stop()));
          const labels = ['commands', 'blocking'];
          loads.forEach((load, i) => {
            for (const at of killedAt) {
              summary.push(expectRecovered(labels[i] as string, { load, twin: twins[i] as SteadyLoad, at }));
            }
            expectClearAndBounded(load, i === 0 ? 200 : 300, twins[i] as SteadyLoad);
          });

          // Idle: nothing in flight when the connections go; the next calls wait for the reconnect within their budget.
          const idleKilledAt = performance.now();
          for (const name of subject.names) await killNamed(admin, name);
          const idle = subject.start();
          await Promise.all([...idle, ...twins].map((l) => until(l, idleKilledAt + 1_000)));
          await Promise.all(idle.map((l) => l.stop()));
          // Compared with the second after the last kill under load: nothing ran in the second before this one.
          const lastKill = killedAt[1] as number;
          idle.forEach((load, i) => {
            const times = [...(loads[i] as SteadyLoad).successTimes(), ...load.successTimes()];
            const around = { load, times, twin: twins[i] as SteadyLoad, at: idleKilledAt };
            summary.push(
              expectRecovered(`idle kill, ${labels[i]}`, { ...around, before: [lastKill, lastKill + 1_000] }),
            );
            expectClearAndBounded(load, i === 0 ? 200 : 300, twins[i] as SteadyLoad);
          });
          await pusher.stop();
          const { left, doubled } = await expectNoneLost(admin, q, pusher.pushed, popped);
          summary.push(`elements: pushed ${pusher.pushed}, popped ${popped.length}, left ${left}, doubled ${doubled}`);
        } finally {
          await Promise.all(twins.map((l) => l.stop()));
          await Promise.all([pusher.stop(), twin.pusher.stop()]);
          console.log(
            `${driver.label}, command connections killed:\n  ${summary.join('\n  ')}\n  app's error handlers saw: ${JSON.stringify(clientErrors)}`,
          );
        }
      }, 60_000);

      /**
       * Calls on a named client that each need a release: at their own timeout (10 to 30 ms), or when the request dies
       * (cancelled at a random moment, its own timeout a minute away), elements pushed meanwhile. A null before its
       * time would be an early release.
       */
      async function releaseLoad() {
        const { name, ops: queue } = await named();
        const q = key();
        const pusher = pusherOf(admin, q);
        const popped: string[] = [];
        const early: string[] = [];
        let round = 0;
        const load = steadyLoad(2, async () => {
          const started = performance.now();
          let result: [string, string] | null;
          let ownMs = Number.POSITIVE_INFINITY;
          if (round++ % 2 === 0) {
            ownMs = Math.round(between(10, 30));
            result = await runWithDeadline(500, () => queue.blpop(q, ownMs / 1000));
          } else {
            const ctx = createContext({ root: true, deadline: 60_000 });
            const pending = ctx.run(() => queue.blpop(q, 0));
            const cancel = setTimeout(() => ctx.cancel('client left'), between(5, 30));
            result = await pending.catch((error: unknown) => {
              if (error instanceof CancelledError) return null;
              throw error;
            });
            clearTimeout(cancel);
            ownMs = 0;
          }
          if (result !== null) popped.push(result[1]);
          else if (performance.now() - started < ownMs) early.push(`null after ${performance.now() - started} ms`);
        });
        return { name, q, pusher, popped, early, load };
      }

      it('the side connection killed under load: every release still happens, the next command is never released', async () => {
        const { name, q, pusher, popped, early, load } = await releaseLoad();
        // Its twin: the same on a client whose side connection nobody kills.
        const twin = await releaseLoad();
        const side = `${name}:release`;
        const summary: string[] = [];
        try {
          const startedAt = performance.now();
          await Promise.all([load, twin.load].map((l) => until(l, startedAt + 1_000)));
          const killedAt: number[] = [];
          for (let i = 0; i < 3; i++) {
            await pusher.pause();
            const at = performance.now();
            const killed = await killNamed(admin, side);
            pusher.resume();
            expect(killed).toHaveLength(1);
            killedAt.push(at);
            await Promise.all([load, twin.load].map((l) => until(l, at + 1_000)));
          }
          await Promise.all([load.stop(), twin.load.stop()]);
          for (const at of killedAt) summary.push(expectRecovered('releases', { load, twin: twin.load, at }));
          expectClearAndBounded(load, 500, twin.load);
          expect(load.failures()).toEqual([]);
          expect(early).toEqual([]);
          // The side connection reconnected: one, under its name.
          expect(await untilNamed(admin, side)).toHaveLength(1);
          await pusher.stop();
          const { left, doubled } = await expectNoneLost(admin, q, pusher.pushed, popped);
          summary.push(`elements: pushed ${pusher.pushed}, popped ${popped.length}, left ${left}, doubled ${doubled}`);
        } finally {
          await Promise.all([load.stop(), twin.load.stop()]);
          await Promise.all([pusher.stop(), twin.pusher.stop()]);
          console.log(`${driver.label}, side connection killed:\n  ${summary.join('\n  ')}`);
        }
      }, 60_000);
    });

    describe.runIf(privateServer)('the server restarted (a private redis-server, killed and started again)', () => {
      let server: PrivateRedis | undefined;
      let twinServer: PrivateRedis | undefined;
      afterEach(async () => {
        await Promise.all([server?.stop(), twinServer?.stop()]);
      });

      it('calls made while it is down fail by their deadline; within a second of its return they succeed at their rate', async () => {
        server = await startRedisServer();
        // The loads' twin runs on a server of its own that stays up.
        twinServer = await startRedisServer();
        const loadsOn = async (url: string) => {
          const [{ ops: redis }, { ops: queue }] = [await named(url), await named(url)];
          const loads = [
            steadyLoad(3, () => runWithDeadline(200, () => redis.incr('counter'))),
            // Nothing is pushed: null at its own timeout, 50 ms (released here each time, the server's tick aside).
            steadyLoad(2, () => runWithDeadline(300, () => queue.blpop('jobs', 0.05))),
          ];
          return { redis, loads };
        };
        const { redis, loads } = await loadsOn(server.url);
        const twins = (await loadsOn(twinServer.url)).loads;
        const summary: string[] = [];
        try {
          const startedAt = performance.now();
          await Promise.all([...loads, ...twins].map((l) => until(l, startedAt + 1_000)));
          // Down until a probe under a 300 ms deadline has failed by it (one written before ioredis saw the drop
          // fails with ioredis's own error instead): the loads' calls fail meanwhile.
          const probes: unknown[] = [];
          const { downAt, upAt } = await server.restart(async () => {
            while (!(probes.at(-1) instanceof DeadlineExceededError) && probes.length < 5) {
              probes.push(await runWithDeadline(300, () => redis.get('probe')).catch((e: unknown) => e));
            }
          });
          expect(probes.at(-1)).toBeInstanceOf(DeadlineExceededError);
          await Promise.all([...loads, ...twins].map((l) => until(l, upAt + 1_000)));
          await Promise.all([...loads, ...twins].map((l) => l.stop()));
          summary.push(
            `down for ${(upAt - downAt).toFixed(0)} ms; probes: ${probes.map((p) => (p as Error).name).join(', ')}`,
          );
          loads.forEach((load, i) => {
            const around = { load, twin: twins[i] as SteadyLoad, at: upAt, before: [downAt - 1_000, downAt] as const };
            summary.push(expectRecovered(i === 0 ? 'commands' : 'blocking', around));
            summary.push(`  failed while it was down and after: ${JSON.stringify(errorsOf(load, downAt))}`);
            expectClearAndBounded(load, i === 0 ? 200 : 300, twins[i] as SteadyLoad);
          });
        } finally {
          await Promise.all([...loads, ...twins].map((l) => l.stop()));
          console.log(`${driver.label}, server restarted:\n  ${summary.join('\n  ')}`);
        }
      }, 30_000);
    });
  });
}
