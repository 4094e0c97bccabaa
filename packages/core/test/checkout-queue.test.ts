/**
 * `CheckoutQueue`, the driver-independent half of a pool's checkout, in front of a pool of test's own (a count of
 * free connections, a `connect()` that takes one): straight to the pool while it has one free; otherwise a wait in
 * the `WaitQueue` (wait-queue.test.ts: the order), a turn per connection that comes free, a waiter without time
 * leaving without touching the pool, and nothing acquired for a dead call kept. No database: the adapters' own
 * suite (test/support/checkout-queue-conformance.ts) runs the same policy against PostgreSQL and MariaDB.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { CancelledError, createContext, DeadlineExceededError, type OwnedContext } from '../src/index.ts';
import { CheckoutQueue, OutgoingCall } from '../src/internal.ts';

const contexts: OwnedContext[] = [];
const calls: OutgoingCall[] = [];
afterEach(() => {
  for (const call of calls.splice(0)) call.end();
  for (const ctx of contexts.splice(0)) ctx.end();
});

/** A call to `db` in a request context of its own with `deadlineMs` left. */
function callWithin(deadlineMs: number): { call: OutgoingCall; ctx: OwnedContext } {
  const ctx = createContext({ root: true, deadline: deadlineMs, hop: 'orders' });
  contexts.push(ctx);
  const call = ctx.run(() => OutgoingCall.start('db', { propagates: false }));
  calls.push(call);
  return { call, ctx };
}

/** Lets `ms` pass, measured by a deadline of its own (the waiters age meanwhile: the condition under test). */
function age(ms: number): Promise<void> {
  const clock = createContext({ root: true, deadline: ms });
  return new Promise<void>((resolve) => clock.onStop(() => resolve()));
}

/** One turn of the event loop: what a microtask-deferred pump would have done, it has done. */
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

interface Connection {
  id: number;
}

/**
 * A pool of `size` connections, all free, and its checkout queue: `checkout` as an adapter makes it, `release`
 * gives a connection back and pumps the queue, as an adapter does on the pool's release.
 */
function pool(size: number) {
  let free = size;
  let opened = 0;
  const late: Connection[] = [];
  const queue = new CheckoutQueue(() => free);
  const connect = async (): Promise<Connection> => {
    free--;
    return { id: ++opened };
  };
  return {
    queue,
    /** Connections handed out by `connect()` so far. */
    get connects() {
      return opened;
    },
    get free() {
      return free;
    },
    late,
    checkout: (call: OutgoingCall, from: () => Promise<Connection> = connect): Promise<Connection> =>
      queue.checkout(call, from, (connection) => late.push(connection)),
    release(): void {
      free++;
      queue.pump();
    },
  };
}

describe('CheckoutQueue', () => {
  it('with a connection free, a checkout goes straight to the pool', async () => {
    const p = pool(2);
    const [a, b] = await Promise.all([p.checkout(callWithin(10_000).call), p.checkout(callWithin(10_000).call)]);
    expect([a.id, b.id]).toEqual([1, 2]);
    expect(p.free).toBe(0);
  });

  it('with none free, callers wait; each connection given back is one turn, to the waiters in arrival order', async () => {
    const p = pool(1);
    const held = await p.checkout(callWithin(10_000).call);
    const order: string[] = [];
    const waits = ['a', 'b', 'c'].map((name) =>
      p.checkout(callWithin(10_000).call).then((connection) => {
        order.push(name);
        return connection;
      }),
    );
    await turn();
    expect(p.connects).toBe(1);
    expect(order).toEqual([]);
    // One connection back: one waiter served, however often the queue is pumped.
    p.release();
    p.queue.pump();
    p.queue.pump();
    await waits[0];
    await turn();
    expect(order).toEqual(['a']);
    expect(p.connects).toBe(2);
    p.release();
    await waits[1];
    p.release();
    await waits[2];
    expect(order).toEqual(['a', 'b', 'c']);
    expect(held.id).toBe(1);
  });

  it('a pump announced before the pool files the connection: the turn is given once it has (a microtask later)', async () => {
    let free = 0;
    const queue = new CheckoutQueue(() => free);
    const waiting = queue.checkout(
      callWithin(10_000).call,
      async () => ({ id: 1 }),
      () => {},
    );
    await turn();
    // The pool announces the release, then files the connection among its idle ones.
    queue.pump();
    free = 1;
    expect(await waiting).toEqual({ id: 1 });
  });

  it('waiters age into newest first, as the wait queue serves them', async () => {
    const p = pool(1);
    await p.checkout(callWithin(10_000).call);
    const order: string[] = [];
    const waits = ['a', 'b', 'c', 'd'].map((name) =>
      p.checkout(callWithin(2_000).call).then(() => {
        order.push(name);
        // Done at once: the connection goes back for the next.
        p.release();
      }),
    );
    // Held 1.2 s of a 2 s budget: the oldest has waited longer than the 0.8 s it has left.
    await age(1_200);
    p.release();
    await Promise.all(waits);
    expect(order).toEqual(['d', 'c', 'b', 'a']);
  });

  it('a waiter whose deadline passes leaves with DeadlineExceededError, the pool untouched; the freed connection goes to the next live waiter', async () => {
    const p = pool(1);
    await p.checkout(callWithin(10_000).call);
    const short = p.checkout(callWithin(100).call).catch((e: unknown) => e);
    const long = p.checkout(callWithin(10_000).call);
    expect(await short).toBeInstanceOf(DeadlineExceededError);
    expect(p.connects).toBe(1);
    p.release();
    expect((await long).id).toBe(2);
    expect(p.connects).toBe(2);
    expect(p.late).toEqual([]);
  });

  it('a waiter whose request is cancelled leaves with CancelledError, never asking the pool', async () => {
    const p = pool(1);
    await p.checkout(callWithin(10_000).call);
    const { call, ctx } = callWithin(10_000);
    const cancelled = p.checkout(call).catch((e: unknown) => e);
    const next = p.checkout(callWithin(10_000).call);
    ctx.cancel(new CancelledError('client left', { reason: 'client-disconnected' }));
    const error = await cancelled;
    expect(error).toBeInstanceOf(CancelledError);
    expect((error as CancelledError).reason).toBe('client-disconnected');
    p.release();
    expect((await next).id).toBe(2);
    expect(p.connects).toBe(2);
  });

  it('a connection that arrives after its call stopped goes to `late` (given back), and the checkout rejects', async () => {
    const p = pool(1);
    const { call, ctx } = callWithin(10_000);
    let handOver: (connection: Connection) => void = () => {};
    let asked = () => {};
    const askedPool = new Promise<void>((resolve) => {
      asked = resolve;
    });
    const checkout = p
      .checkout(call, () => {
        asked();
        return new Promise<Connection>((resolve) => {
          handOver = resolve;
        });
      })
      .catch((e: unknown) => e);
    await askedPool;
    ctx.cancel(new CancelledError('client left'));
    expect(await checkout).toBeInstanceOf(CancelledError);
    handOver({ id: 7 });
    await turn();
    expect(p.late).toEqual([{ id: 7 }]);
  });

  it('a checkout whose connect fails passes its turn on to the next waiter', async () => {
    const p = pool(1);
    await p.checkout(callWithin(10_000).call);
    const failing = p
      .checkout(callWithin(10_000).call, () => Promise.reject(new Error('connection refused')))
      .catch((e: unknown) => e);
    const next = p.checkout(callWithin(10_000).call);
    p.release();
    expect(await failing).toMatchObject({ message: 'connection refused' });
    // The connection it did not take is still free: the next waiter gets it without another release.
    expect((await next).id).toBe(2);
  });

  it('observe(): a waiter leaves (before-call) once its time left no longer covers a typical unit of work', async () => {
    const p = pool(1);
    p.queue.observe(700);
    await p.checkout(callWithin(10_000).call);
    const started = performance.now();
    // 1 s, of which the work typically takes 0.7 s: it waits 0.3 s at most, then leaves ahead of its deadline.
    const late = await p.checkout(callWithin(1_000).call).catch((e: unknown) => e);
    const waited = performance.now() - started;
    expect(late).toBeInstanceOf(DeadlineExceededError);
    expect(late).toMatchObject({ phase: 'before-call', target: 'db' });
    expect((late as Error).message).toMatch(/less than its work takes \(~700 ms\)/);
    expect(waited).toBeGreaterThanOrEqual(290);
    expect(waited).toBeLessThan(1_000);
    // With less than that left already, it does not queue at all.
    const hopeless = await p.checkout(callWithin(500).call).catch((e: unknown) => e);
    expect(hopeless).toMatchObject({ phase: 'before-call' });
    expect(p.connects).toBe(1);
    // With a connection free, a call with little time is not refused: the pool is not a queue to wait in.
    p.release();
    await turn();
    expect((await p.checkout(callWithin(500).call)).id).toBe(2);
  });

  it('observe() follows the work: a moving average of the units that succeeded', async () => {
    const p = pool(1);
    await p.checkout(callWithin(10_000).call);
    p.queue.observe(100);
    // 100 + 0.1 × (1,100 − 100) = 200 ms.
    p.queue.observe(1_100);
    const error = await p.checkout(callWithin(150).call).catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/less than its work takes \(~200 ms\)/);
  });

  it('nothing left behind: 100 waiters whose deadlines pass leave no one ahead of the next checkout', async () => {
    const p = pool(1);
    await p.checkout(callWithin(10_000).call);
    const expired = await Promise.all(
      Array.from({ length: 100 }, () => p.checkout(callWithin(100).call).catch((e: unknown) => e)),
    );
    expect(expired.every((e) => e instanceof DeadlineExceededError)).toBe(true);
    expect(p.connects).toBe(1);
    // A connection comes free without a pump: a waiter left in the queue would keep the next checkout waiting
    // behind it (to its deadline); with none, it goes straight to the pool.
    p.release();
    const connection = await p.checkout(callWithin(5_000).call);
    expect(connection.id).toBe(2);
    expect(p.late).toEqual([]);
  });
});
