/**
 * What only ioredis does when Redis drops connections (`CLIENT KILL`, on the shared server, of the test's own
 * connections only, found by the names it gave them): it sends a blocking command again on the new connection,
 * where its timeout starts over; its side connection is an ioredis `duplicate()` with options of its own. What every
 * client gets under faults — calls back within a second at their rate, nothing lost, a restarted server — is the
 * fault suite's (conformance/faults.ts), run on ioredis 5 and 6 and node-redis 5 and 6.
 */
import { once } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import { CancelledError, createContext, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectEachTestLives } from '../../../test/support/process-watch.ts';
import { REDIS, requireService } from '../../../test/support/services.ts';
import { withDeadline } from '../src/index.ts';
import { isBlocked, killNamed, untilBlocked, untilNamed } from './connections.ts';
import { ONE_TURN_MS, RELEASED_MS, SETTLE_MARGIN_MS } from './fault-checks.ts';

const available = await requireService(REDIS);

const clients: Redis[] = [];
/** Errors the app's own `'error'` handlers saw (needed with plain ioredis too). */
const clientErrors: string[] = [];
let nameNumber = 0;
/** A client named for this test, with the app's own `'error'` handler, as any app must have. */
function named(): { raw: Redis; name: string } {
  const name = `deadline-faults-${process.pid}-${++nameNumber}`;
  const raw = new Redis(REDIS.url, { maxRetriesPerRequest: 1, connectionName: name });
  raw.on('error', (error: Error) => clientErrors.push(error.message));
  clients.push(raw);
  return { raw, name };
}
/** A wrapped client named for this test, and a key of its own. */
function wrapped() {
  const { raw, name } = named();
  return { raw, name, queue: withDeadline(raw), q: key() };
}
let admin: Redis;
let keyNumber = 0;
const key = () => `deadline:faults:${process.pid}:${++keyNumber}`;

describe.runIf(available)('@deadline/redis: connections dropped by the server', () => {
  beforeAll(() => {
    admin = new Redis(REDIS.url);
    clients.push(admin);
  });
  // Nothing may reach the process during any of these tests.
  expectEachTestLives();
  afterAll(() => {
    for (const redis of clients) redis.disconnect();
  });

  it('both connections killed while BLPOP blocks: re-sent with its timeout starting over, it is still released at its deadline', async () => {
    const { name, queue, q } = wrapped();
    // Blocked, with a server-side timeout of 1,480 ms; after the kill ioredis sends it again on the new connection,
    // where that timeout starts over: the server alone would end it about 1.5 s after the deadline.
    const started = performance.now();
    // A plain timer for the same 1.5 s beside it: how late the machine let timers fire.
    const timerLate = delay(1_500).then(() => performance.now() - started - 1_500);
    const pending = runWithDeadline(1_500, () => queue.blpop(q, 0)).catch((e: unknown) => e);
    const [oldId] = (await untilNamed(admin, name)) as [string];
    await untilBlocked(admin, oldId, true);
    await killNamed(admin, `${name}:release`);
    await killNamed(admin, name);
    const [newId] = (await untilNamed(admin, name, [oldId])) as [string];
    await untilBlocked(admin, newId, true);
    const error = await pending;
    const deadlineAt = performance.now();
    const late = await timerLate;
    if (error === null) {
      // The server's own null (its timeout started over on the new connection: due after the deadline) came first
      // only if this process was held up past it, the deadline's timer with it: that timer fired as late.
      expect(late, 'answered null, not at its deadline').toBeGreaterThanOrEqual(
        deadlineAt - started - 1_500 - ONE_TURN_MS,
      );
    } else expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(deadlineAt - started).toBeLessThan(1_500 + late + SETTLE_MARGIN_MS);
    const releasedAfter = (await untilBlocked(admin, newId, false)) - deadlineAt;
    console.log(
      `both connections killed mid-BLPOP: re-sent, released ${releasedAfter.toFixed(1)} ms after its deadline`,
    );
    expect(releasedAfter).toBeLessThan(RELEASED_MS);
  });

  it("the side connection has its 'error' listener before it first connects, and keeps it through reconnects", async () => {
    const { raw, name } = named();
    // Every connection made from the client (the side connection is its duplicate()) is followed from birth.
    const made: { listenersAtConnect: number[]; connection: Redis }[] = [];
    const duplicate = raw.duplicate.bind(raw);
    raw.duplicate = (override) => {
      const connection = duplicate(override);
      const followed = { listenersAtConnect: [] as number[], connection };
      made.push(followed);
      // Not connecting yet when handed over: its listeners go on first.
      expect(connection.status).toBe('wait');
      const connect = connection.connect.bind(connection);
      connection.connect = (callback) => {
        followed.listenersAtConnect.push(connection.listenerCount('error'));
        return connect(callback);
      };
      return connection;
    };
    const queue = withDeadline(raw);
    const ctx = createContext({ root: true, deadline: 60_000 });
    const pending = ctx.run(() => queue.blpop(key(), 0)).catch((e: unknown) => e);
    const [id] = (await untilNamed(admin, name)) as [string];
    await untilBlocked(admin, id, true);
    // Killed, then asked to release: it reconnects (ioredis calls connect() again) and still has its listener.
    await killNamed(admin, `${name}:release`);
    ctx.cancel('client left');
    expect(await pending).toBeInstanceOf(CancelledError);
    await untilBlocked(admin, id, false);
    expect(made).toHaveLength(1);
    const [side] = made as [(typeof made)[0]];
    expect(side.listenersAtConnect.length).toBeGreaterThanOrEqual(2);
    expect(side.listenersAtConnect.every((n) => n > 0)).toBe(true);
    expect(side.connection.listenerCount('error')).toBeGreaterThan(0);
  });

  it('the side connection dropped, its status still "ready": the release waits for it, and happens', async () => {
    const { raw, name } = named();
    let side: Redis | undefined;
    const duplicate = raw.duplicate.bind(raw);
    raw.duplicate = (override) => (side = duplicate(override));
    const queue = withDeadline(raw);
    const ctx = createContext({ root: true, deadline: 60_000 });
    const pending = ctx.run(() => queue.blpop(key(), 0)).catch((e: unknown) => e);
    const [id] = (await untilNamed(admin, name)) as [string];
    await untilBlocked(admin, id, true);
    // Opened ahead, when the command was sent: ready now, or soon.
    if (side?.status !== 'ready') await once(side as Redis, 'ready');
    // Gone under ioredis's feet: until the close is seen, ioredis refuses every command at once ("Stream isn't
    // writeable"). A release retried at once would spin in microtasks and never let that close be seen.
    (side as unknown as { stream: { destroy(): void } }).stream.destroy();
    ctx.cancel('client left');
    expect(await pending).toBeInstanceOf(CancelledError);
    await untilBlocked(admin, id, false);
  });

  it("a late UNBLOCK of a dead connection's id leaves the new connection's blocked command alone", async () => {
    const { name, queue, q } = wrapped();
    // X blocks; its request dies in the same tick as its connection is killed: the library's UNBLOCK of the old
    // id and the kill race to the server (either order is a case: released then killed, or a late UNBLOCK).
    const x = createContext({ root: true, deadline: 60_000 });
    const first = x.run(() => queue.blpop(q, 0)).catch((e: unknown) => e);
    const [oldId] = (await untilNamed(admin, name)) as [string];
    await untilBlocked(admin, oldId, true);
    const killing = admin.client('KILL', 'ID', oldId);
    x.cancel('client left');
    await killing;
    expect(await first).toBeInstanceOf(CancelledError);
    // Y (a BRPOP, to tell it apart), on the new connection: written once X — which ioredis may re-send there —
    // has replied or been released, in its turn.
    const y = createContext({ root: true, deadline: 60_000 });
    const second = y.run(() => queue.brpop(q, 0)).catch((e: unknown) => e);
    const [newId] = (await untilNamed(admin, name, [oldId])) as [string];
    expect(Number(newId)).toBeGreaterThan(Number(oldId));
    await untilBlocked(admin, newId, true, 5_000, 'brpop');
    // The old id again, late, by hand: it names a connection that no longer exists, and no other (ids are not
    // reused). Y stays blocked, and ends only when its own request does.
    expect(await admin.client('UNBLOCK', oldId, 'TIMEOUT')).toBe(0);
    expect(await isBlocked(admin, newId, 'brpop')).toBe(true);
    y.cancel('client left');
    expect(await second).toBeInstanceOf(CancelledError);
    await untilBlocked(admin, newId, false);
  });
});
