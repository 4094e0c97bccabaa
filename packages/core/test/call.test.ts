/** `OutgoingCall`: the one object every transport adapter drives for a call. */
import diagnostics from 'node:diagnostics_channel';
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type CallEndMessage,
  type CallOutlivedMessage,
  type CallStartMessage,
  CancelledError,
  createContext,
  DeadlineExceededError,
  DiagnosticsChannel,
  runWithDeadline,
} from '../src/index.ts';
import { OutgoingCall, type Scope, waitingForExpiry } from '../src/internal.ts';

const subscriptions: [string, (message: unknown) => void][] = [];
function collect<T>(channel: string): T[] {
  const seen: T[] = [];
  const listener = (message: unknown) => seen.push(message as T);
  diagnostics.subscribe(channel, listener);
  subscriptions.push([channel, listener]);
  return seen;
}
afterEach(() => {
  for (const [channel, listener] of subscriptions.splice(0)) diagnostics.unsubscribe(channel, listener);
});

function stopped(call: OutgoingCall): Promise<DeadlineExceededError | CancelledError> {
  return new Promise((resolve) => call.onStop(resolve));
}

describe('OutgoingCall', () => {
  it('refuses before the call when no time is left', () => {
    const ctx = createContext({ root: true, deadline: 0.5, hop: 'gw' });
    expect(() => ctx.run(() => OutgoingCall.start('db'))).toThrow(DeadlineExceededError);
  });

  it('stops at its own timeout (a margin) before the context does, with a during-call error', async () => {
    const error = await runWithDeadline(1_000, () => stopped(OutgoingCall.start('db', { marginMs: 900 })));
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'during-call', target: 'db', whose: 'local' });
  });

  it("stops with the context's deadline, and with its cancellation", async () => {
    const expired = await runWithDeadline(50, () => stopped(OutgoingCall.start('db')));
    expect(expired).toMatchObject({ phase: 'during-call', target: 'db' });
    const ctx = createContext({ root: true, deadline: 10_000 });
    const call = ctx.run(() => OutgoingCall.start('db'));
    const pending = stopped(call);
    ctx.cancel(new CancelledError('gone', { reason: 'client-disconnected' }));
    const cancelled = await pending;
    expect(cancelled).toBeInstanceOf(CancelledError);
    expect((cancelled as CancelledError).reason).toBe('client-disconnected');
    expect(call.stopReason).toBe(cancelled);
  });

  it('end() disarms: no listener left on a long-lived context after many calls, nothing waiting', async () => {
    const ctx = createContext({ root: true, deadline: 3_600_000 });
    const before = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const waitingBefore = waitingForExpiry();
    ctx.run(() => {
      for (let i = 0; i < 10_000; i++) {
        const call = OutgoingCall.start('db', { marginMs: i % 2 === 0 ? 10 : 0 });
        call.onStop(() => {});
        call.end();
      }
    });
    expect((ctx as unknown as Scope)._listeners ?? []).toHaveLength(0);
    const after = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    // The expiry queue's one timer at most, and no call still waiting for its deadline.
    expect(after - before).toBeLessThanOrEqual(1);
    expect(waitingForExpiry() - waitingBefore).toBeLessThanOrEqual(1);
    ctx.end();
  });

  it('publishes call start and end with the figures a log line needs', async () => {
    const starts = collect<CallStartMessage>(DiagnosticsChannel.CallStart);
    const ends = collect<CallEndMessage>(DiagnosticsChannel.CallEnd);
    const before = performance.now();
    await runWithDeadline(1_000, async () => {
      const call = OutgoingCall.start('GET http://inventory/stock', { marginMs: 10 });
      call.end(undefined, 200);
    });
    const elapsed = performance.now() - before;
    expect(starts).toHaveLength(1);
    // The budget less what had passed by the call's start (at most all of it, however slow the machine).
    expect(starts[0]?.remainingMs).toBeGreaterThanOrEqual(1_000 - elapsed - 1);
    expect(starts[0]?.timeoutMs).toBeLessThanOrEqual(990);
    expect(ends[0]).toMatchObject({ target: 'GET http://inventory/stock', outcome: 'ok', statusCode: 200 });
    expect(ends[0]?.elapsedMs).toBeGreaterThanOrEqual(0);
    await runWithDeadline(1_000, async () => OutgoingCall.start('GET http://inventory/stock').end(undefined, 503));
    expect(ends[1]?.outcome).toBe('error');
  });

  it('outside a context: unbounded, unless a default budget is given (then it is sent)', () => {
    const plain = OutgoingCall.start('db');
    expect(plain.timeoutMs).toBeUndefined();
    expect(plain.headers).toEqual({});
    const withDefault = OutgoingCall.start('db', { defaultMs: 750 });
    expect(withDefault.timeoutMs).toBe(750);
    expect(withDefault.headers['x-request-deadline']).toBe('750');
    plain.end();
    withDefault.end();
  });

  it('race(): the stop wins over slow work, a late value is handed to discard, a stopped call starts nothing', async () => {
    const ctx = createContext({ root: true, deadline: 10_000 });
    const call = ctx.run(() => OutgoingCall.start('pool'));
    let arrive: (value: string) => void = () => {};
    const slow = new Promise<string>((resolve) => {
      arrive = resolve;
    });
    const discarded: string[] = [];
    const raced = call.race(
      () => slow,
      (late) => discarded.push(late),
    );
    ctx.cancel('client left');
    await expect(raced).rejects.toBeInstanceOf(CancelledError);
    arrive('connection');
    await slow;
    await Promise.resolve();
    expect(discarded).toEqual(['connection']);
    let started = false;
    await expect(
      call.race(async () => {
        started = true;
      }),
    ).rejects.toBeInstanceOf(CancelledError);
    expect(started).toBe(false);
    // Work that wins takes its stop listener off: nothing is left on the call.
    const quick = createContext({ root: true, deadline: 10_000 }).run(() => OutgoingCall.start('pool'));
    expect(await quick.race(async () => 'ok')).toBe('ok');
    quick.end();
  });

  it("a downstream's reported deadline names that hop", () => {
    const call = OutgoingCall.start('GET http://orders/');
    const error = call.downstreamExceeded('orders');
    expect(error).toMatchObject({ whose: 'downstream:orders', hop: 'orders', phase: 'during-call' });
    call.end(error, 504);
  });
});

describe('a context its owner released (end({ cancel: false })): work left running', () => {
  it('keeps running under the deadline, and each call that ends afterwards is reported once with how long it outlived it', async () => {
    const outlived = collect<CallOutlivedMessage>(DiagnosticsChannel.CallOutlived);
    const reported: CallOutlivedMessage[] = [];
    const ctx = createContext({ root: true, deadline: 10_000, hop: 'orders' }) as unknown as Scope;
    const running = ctx.run(() => OutgoingCall.start('audit-db'));
    const stops: unknown[] = [];
    running.onStop((error) => stops.push(error));
    ctx._release({ callOutlived: (message) => reported.push(message) });
    // Not cancelled: the call still runs, the context is live, the call may still be cut by the deadline.
    expect(ctx.stopReason).toBeUndefined();
    expect(running.stopReason).toBeUndefined();
    await new Promise((resolve) => setTimeout(resolve, 20));
    running.end();
    expect(stops).toEqual([]);
    expect(outlived).toHaveLength(1);
    expect(outlived[0]).toMatchObject({ target: 'audit-db', outcome: 'ok' });
    expect(outlived[0]?.outlivedMs).toBeGreaterThanOrEqual(15);
    expect(reported).toEqual(outlived);
    // Nothing kept once it ended: no listener, no timer.
    expect(ctx._listeners).toBeUndefined();
    expect(ctx._waiting).toBe(-1);
  });

  it('a call made after the release is bounded by the same deadline and cut at it', async () => {
    const outlived = collect<CallOutlivedMessage>(DiagnosticsChannel.CallOutlived);
    const ctx = createContext({ root: true, deadline: 80 });
    ctx.end({ cancel: false });
    const call = ctx.run(() => OutgoingCall.start('db'));
    expect(call.timeoutMs).toBeLessThanOrEqual(80);
    const error = await stopped(call);
    call.end();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'during-call', target: 'db' });
    expect(outlived).toHaveLength(1);
    expect(outlived[0]).toMatchObject({ outcome: 'deadline_exceeded' });
    // Once past the deadline, nothing more is started.
    expect(() => ctx.run(() => OutgoingCall.start('db'))).toThrow(DeadlineExceededError);
  });

  it('a cancellation after the release still stops the work; a child context’s calls are reported too', async () => {
    const outlived = collect<CallOutlivedMessage>(DiagnosticsChannel.CallOutlived);
    const ctx = createContext({ root: true, deadline: 10_000 });
    const call = ctx.run(() => createContext({ deadline: 5_000 }).run(() => OutgoingCall.start('child-db')));
    const pending = stopped(call);
    ctx.end({ cancel: false });
    ctx.cancel(new CancelledError('gone', { reason: 'client-disconnected' }));
    expect(await pending).toMatchObject({ reason: 'client-disconnected' });
    call.end();
    expect(outlived.map((m) => m.target)).toEqual(['child-db']);
  });

  it('a call cut before the release, its stop still on its way when the owner let go, did not outlive it', async () => {
    const outlived = collect<CallOutlivedMessage>(DiagnosticsChannel.CallOutlived);
    const ctx = createContext({ root: true, deadline: 10_000 });
    // A child with a budget of its own (a GraphQL field's): cut at it, then the owner answers and lets go.
    const field = ctx.run(() => createContext({ deadline: 30 }));
    const call = field.run(() => OutgoingCall.start('field-db'));
    await stopped(call);
    field.end();
    ctx.end({ cancel: false });
    // The call ends after the release: the server confirmed the cancel a moment later.
    call.end();
    expect(outlived).toEqual([]);
  });

  it('the signal, once handed out, still aborts at the deadline (an AbortSignal.any() adds no listener to it)', async () => {
    const ctx = createContext({ root: true, deadline: 50 });
    const linked = AbortSignal.any([ctx.signal as AbortSignal]);
    ctx.end({ cancel: false });
    expect(linked.aborted).toBe(false);
    await once(linked, 'abort');
    expect(linked.reason).toBeInstanceOf(DeadlineExceededError);
  });

  it('ended normally (Go’s rule) nothing is reported: the work was cancelled', async () => {
    const outlived = collect<CallOutlivedMessage>(DiagnosticsChannel.CallOutlived);
    const ctx = createContext({ root: true, deadline: 10_000 });
    const call = ctx.run(() => OutgoingCall.start('db'));
    const pending = stopped(call);
    ctx.end();
    expect(await pending).toMatchObject({ reason: 'context-ended' });
    call.end();
    expect(outlived).toEqual([]);
  });
});
