/**
 * `WaitQueue`, the policy of who gets the next free resource, without any database: in arrival order while the
 * queue keeps up with its waiters' deadlines, newest first once the oldest has waited as long as it has left;
 * a waiter leaves when its call stops (deadline, cancellation) or, with `reserveMs`, once its time left no longer
 * covers the work. Real timers and real deadlines, with generous bounds: time in the queue is the condition under
 * test, and it is let pass by a deadline of its own, never by a guessed sleep to synchronise.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { CancelledError, createContext, DeadlineExceededError, type OwnedContext } from '../src/index.ts';
import { OutgoingCall, type Scope, WaitQueue } from '../src/internal.ts';

const contexts: OwnedContext[] = [];
const calls: OutgoingCall[] = [];
afterEach(() => {
  for (const call of calls.splice(0)) call.end();
  for (const ctx of contexts.splice(0)) ctx.end();
});

/** A call to `db` in a request context of its own with `deadlineMs` left (outside any context without one). */
function callWithin(deadlineMs?: number, options: { marginMs?: number } = {}): OutgoingCall {
  let call: OutgoingCall;
  if (deadlineMs === undefined) call = OutgoingCall.start('db', { propagates: false });
  else {
    const ctx = createContext({ root: true, deadline: deadlineMs, hop: 'orders' });
    contexts.push(ctx);
    call = ctx.run(() => OutgoingCall.start('db', { propagates: false, ...options }));
  }
  calls.push(call);
  return call;
}

/** Lets `ms` pass, measured by a deadline of its own (the waiters age meanwhile: the condition under test). */
function age(ms: number): Promise<void> {
  const clock = createContext({ root: true, deadline: ms });
  return new Promise<void>((resolve) => clock.onStop(() => resolve()));
}

/** Queues one waiter per name, in that order, each with `budgetMs`; `order` records them as they are served. */
function queueUp(queue: WaitQueue, names: string[], budgetMs: number) {
  const order: string[] = [];
  const served = names.map((name) => queue.wait(callWithin(budgetMs)).then(() => order.push(name)));
  return { order, served: Promise.all(served) };
}

/** Serves until the queue has no one left; resolves with how many turns were given. */
function serveAll(queue: WaitQueue): number {
  let turns = 0;
  while (queue.serveNext()) turns++;
  return turns;
}

describe('WaitQueue: the order of service', () => {
  it('while the queue keeps up with the deadlines: first come, first served', async () => {
    const queue = new WaitQueue();
    const { order, served } = queueUp(queue, ['a', 'b', 'c', 'd'], 10_000);
    expect(queue.size).toBe(4);
    expect(serveAll(queue)).toBe(4);
    await served;
    expect(order).toEqual(['a', 'b', 'c', 'd']);
    expect(queue.size).toBe(0);
    expect(queue.serveNext()).toBe(false);
  });

  it('once the oldest has waited as long as it has left: newest first', async () => {
    const queue = new WaitQueue();
    const { order, served } = queueUp(queue, ['a', 'b', 'c', 'd'], 2_000);
    // 1.2 s of a 2 s budget in the queue: the oldest has waited longer than the 0.8 s it has left (and a stall of
    // the machine only ages it more).
    await age(1_200);
    expect(serveAll(queue)).toBe(4);
    await served;
    expect(order).toEqual(['d', 'c', 'b', 'a']);
  });

  it('the switch is read off the oldest waiter: one with time to spare keeps arrival order for all', async () => {
    const queue = new WaitQueue();
    const order: string[] = [];
    // The oldest has 10 s, the others 2 s: after 1.2 s the oldest has waited far less than it has left.
    const served = [
      queue.wait(callWithin(10_000)).then(() => order.push('a')),
      ...['b', 'c'].map((name) => queue.wait(callWithin(2_000)).then(() => order.push(name))),
    ];
    await age(1_200);
    expect(queue.serveNext()).toBe(true);
    await served[0];
    expect(order).toEqual(['a']);
    // With it gone the oldest is one that has waited as long as it has left: newest first from there.
    expect(serveAll(queue)).toBe(2);
    await Promise.all(served);
    expect(order).toEqual(['a', 'c', 'b']);
  });

  it('a waiter without a deadline waits until it is served, in arrival order', async () => {
    const queue = new WaitQueue();
    const order: string[] = [];
    const unbounded = callWithin(undefined);
    expect(unbounded.timeoutMs).toBeUndefined();
    const served = [
      queue.wait(unbounded, 100).then(() => order.push('unbounded')),
      queue.wait(callWithin(10_000)).then(() => order.push('bounded')),
    ];
    expect(serveAll(queue)).toBe(2);
    await Promise.all(served);
    expect(order).toEqual(['unbounded', 'bounded']);
  });
});

describe('WaitQueue: leaving the queue', () => {
  it('a waiter whose deadline passes leaves with DeadlineExceededError; the turn goes to the next live waiter', async () => {
    const queue = new WaitQueue();
    const short = callWithin(100);
    const long = callWithin(10_000);
    const shortWait = queue.wait(short).catch((e: unknown) => e);
    let longServed = false;
    const longWait = queue.wait(long).then(() => {
      longServed = true;
    });
    expect(queue.size).toBe(2);
    const error = await shortWait;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toBe(short.stopReason);
    expect(queue.size).toBe(1);
    expect(longServed).toBe(false);
    expect(queue.serveNext()).toBe(true);
    await longWait;
    expect(longServed).toBe(true);
    expect(queue.size).toBe(0);
    expect(queue.serveNext()).toBe(false);
  });

  it('a waiter whose request is cancelled leaves with that CancelledError; the others keep their places', async () => {
    const queue = new WaitQueue();
    const order: string[] = [];
    const first = queue.wait(callWithin(10_000)).then(() => order.push('first'));
    const ctx = createContext({ root: true, deadline: 10_000 });
    contexts.push(ctx);
    const cancelled = queue.wait(ctx.run(() => OutgoingCall.start('db', { propagates: false }))).catch((e) => e);
    const last = queue.wait(callWithin(10_000)).then(() => order.push('last'));
    ctx.cancel(new CancelledError('client left', { reason: 'client-disconnected' }));
    const error = await cancelled;
    expect(error).toBeInstanceOf(CancelledError);
    expect((error as CancelledError).reason).toBe('client-disconnected');
    expect(queue.size).toBe(2);
    expect(serveAll(queue)).toBe(2);
    await Promise.all([first, last]);
    expect(order).toEqual(['first', 'last']);
  });

  it('a call stopped by its adapter leaves with the error it was stopped with', async () => {
    const queue = new WaitQueue();
    const call = callWithin(10_000);
    const waiting = queue.wait(call).catch((e: unknown) => e);
    const reason = new CancelledError('the pool was closed');
    call.stop(reason);
    expect(await waiting).toBe(reason);
    expect(queue.size).toBe(0);
  });

  it('a call already stopped does not queue: it is refused with its stop reason', async () => {
    const queue = new WaitQueue();
    const call = callWithin(10_000);
    const reason = new CancelledError('stopped before it queued');
    call.stop(reason);
    await expect(queue.wait(call)).rejects.toBe(reason);
    expect(queue.size).toBe(0);
  });

  it('reserveMs: it leaves (before-call) once its time left no longer covers the work, ahead of its deadline', async () => {
    const queue = new WaitQueue();
    const started = performance.now();
    // 5 s, of which the work typically takes 4.7 s: 0.3 s to wait at most.
    const call = callWithin(5_000);
    const error = await queue.wait(call, 4_700).catch((e: unknown) => e);
    const waited = performance.now() - started;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'before-call', target: 'db', hop: 'orders', budgetMs: call.timeoutMs });
    expect((error as Error).message).toMatch(/ms left in the queue, less than its work takes \(~4700 ms\)/);
    // The call itself is stopped with it: its adapter's other listeners learn why.
    expect(call.stopReason).toBe(error);
    expect(waited).toBeGreaterThanOrEqual(295);
    expect(waited).toBeLessThan(5_000);
    expect(queue.size).toBe(0);
  });

  it('reserveMs: with less than that left already, it is refused at once, without queueing', async () => {
    const queue = new WaitQueue();
    const call = callWithin(1_000);
    const error = await queue.wait(call, 2_000).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'before-call', target: 'db' });
    expect((error as Error).message).toMatch(/less than its work takes \(~2000 ms\)/);
    expect(queue.size).toBe(0);
    // Refused, not stopped: the call may still be made some other way.
    expect(call.stopReason).toBeUndefined();
  });

  it('reserveMs: a waiter served in time is not stopped later by its reserve timer', async () => {
    const queue = new WaitQueue();
    const call = callWithin(2_000);
    const waiting = queue.wait(call, 1_800);
    expect(queue.serveNext()).toBe(true);
    await waiting;
    // Past the moment its reserve would have run out (0.2 s): nothing stopped it.
    await age(400);
    expect(call.stopReason).toBeUndefined();
  });
});

describe('WaitQueue: nothing left behind', () => {
  it('300 waiters served, expired or cancelled leave an empty queue and no listener on their request', async () => {
    const queue = new WaitQueue();
    const ctx = createContext({ root: true, deadline: 60_000 });
    contexts.push(ctx);
    const outcomes = { served: 0, expired: 0, cancelled: 0 };
    const waits: Promise<void>[] = [];
    const toCancel: OutgoingCall[] = [];
    ctx.run(() => {
      for (let i = 0; i < 300; i++) {
        // A third with a call of their own of ~100 ms (the rest of the request's minute is the margin).
        const call = OutgoingCall.start('db', { propagates: false, ...(i % 3 === 1 ? { marginMs: 59_900 } : {}) });
        calls.push(call);
        if (i % 3 === 2) toCancel.push(call);
        waits.push(
          queue.wait(call, i % 2 === 0 ? 10 : 0).then(
            () => {
              outcomes.served++;
            },
            (error: unknown) => {
              if (error instanceof DeadlineExceededError) outcomes.expired++;
              else if (error instanceof CancelledError) outcomes.cancelled++;
            },
          ),
        );
      }
    });
    expect(queue.size).toBe(300);
    for (const call of toCancel) call.stop(new CancelledError('gone'));
    expect(queue.size).toBe(200);
    // Serve half of those with time, then wait for the ~100 ms ones to leave, then serve the rest.
    for (let i = 0; i < 50; i++) expect(queue.serveNext()).toBe(true);
    await Promise.all(waits.filter((_, i) => i % 3 === 1));
    serveAll(queue);
    await Promise.all(waits);
    expect(outcomes.cancelled).toBe(100);
    expect(outcomes.expired + outcomes.served).toBe(200);
    expect(outcomes.served).toBeGreaterThanOrEqual(100);
    expect(queue.size).toBe(0);
    for (const call of calls) call.end();
    expect((ctx as unknown as Scope)._listeners ?? []).toHaveLength(0);
  });
});
