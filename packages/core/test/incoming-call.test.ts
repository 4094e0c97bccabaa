/**
 * The server side of an RPC call, as both RPC adapters share it (`IncomingCall`): the budget a caller may ask for (any
 * caller may shorten the default, a trusted one lengthen it up to maxMs), a timeout of 0 refused, and the protocol's
 * own copy of the caller's deadline — its timer aborting the protocol's signal, the caller's reset at its deadline —
 * stopping the context as this hop's deadline, not as the caller leaving. Unit tests: the adapters' own tests run
 * these paths on real servers.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CancelledError, DeadlineExceededError, DiagnosticsChannel } from '../src/index.ts';
import {
  IncomingCall,
  type IncomingCallInit,
  type IncomingCallOptions,
  resolveIncomingOptions,
} from '../src/internal.ts';
import { createBudgetParser } from '../src/wire.ts';

interface Call {
  internal: boolean;
}

const parser = createBudgetParser();

/** A call of `init`'s shape to a service of `options` (`serviceName: 'inventory'` unless given). */
function start(
  init: Partial<IncomingCallInit<Call>> & { headers?: Record<string, string> },
  options: IncomingCallOptions<Call> = {},
): IncomingCall<Call> {
  return new IncomingCall<Call>(
    {
      call: { internal: false },
      method: '/inventory.Inventory/Reserve',
      protocol: 'grpc',
      ownMs: Number.POSITIVE_INFINITY,
      ...init,
      headers: init.headers ?? {},
    },
    resolveIncomingOptions({ serviceName: 'inventory', ...options }),
    parser,
  );
}

const trustInternal = { defaultMs: 1_000, maxMs: 5_000, trust: (call: Call) => call.internal };

describe('the budget', () => {
  it('is the default without a deadline; any caller may shorten it, a trusted one lengthen it up to maxMs', () => {
    expect(start({}, trustInternal)).toMatchObject({ budgetMs: 1_000, source: 'default', requestedMs: undefined });
    expect(start({ ownMs: 400 }, trustInternal)).toMatchObject({ budgetMs: 400, source: 'header' });
    // Untrusted, asking for more: the default, and what it asked for is reported.
    expect(start({ ownMs: 3_000 }, trustInternal)).toMatchObject({
      budgetMs: 1_000,
      source: 'default',
      requestedMs: 3_000,
    });
    const trusted = { call: { internal: true } };
    expect(start({ ...trusted, ownMs: 3_000 }, trustInternal)).toMatchObject({ budgetMs: 3_000, source: 'header' });
    expect(start({ ...trusted, headers: { 'x-request-deadline': '60000' } }, trustInternal)).toMatchObject({
      budgetMs: 5_000,
      source: 'header',
      requestedMs: 60_000,
    });
  });

  it('without a trust option no caller is trusted; a throwing predicate trusts none either', () => {
    expect(start({ call: { internal: true }, ownMs: 20_000 })).toMatchObject({ budgetMs: 15_000, source: 'default' });
    const throwing = {
      trust: () => {
        throw new Error('broken predicate');
      },
    };
    expect(start({ ownMs: 20_000 }, throwing)).toMatchObject({ budgetMs: 15_000, requestedMs: 20_000 });
    expect(start({ ownMs: 300 }, throwing)).toMatchObject({ budgetMs: 300, source: 'header' });
  });

  it('reports what the caller asked for beyond what a timer holds, not the parser’s clamp', () => {
    const asked = start({ call: { internal: true }, headers: { 'connect-timeout-ms': '9999999999' } }, trustInternal);
    expect(asked).toMatchObject({ budgetMs: 5_000, requestedMs: 9_999_999_999 });
  });

  it('falls leadMs before the protocol’s own timeout; the caller’s own ask is what is reported', () => {
    expect(start({ ownMs: 300, leadMs: 10 }).budgetMs).toBe(290);
    // A budget header shorter than the protocol's timeout less the lead is the budget as it is.
    expect(start({ ownMs: 300, leadMs: 10, headers: { 'x-request-deadline': '200' } }).budgetMs).toBe(200);
    expect(start({ call: { internal: true }, ownMs: 60_000, leadMs: 10 }, trustInternal)).toMatchObject({
      budgetMs: 5_000,
      requestedMs: 60_000,
    });
  });
});

describe('a message that waited in a broker', () => {
  const now = Date.now();
  const sent = (budgetMs: number, deadlineAt: number | string) => ({
    'x-request-deadline': String(budgetMs),
    'x-request-deadline-at': String(deadlineAt),
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('loses the time it surely waited: what its wall-clock deadline says, less the clocks’ allowance', () => {
    vi.spyOn(Date, 'now').mockReturnValue(now);
    const waited = start({ headers: sent(1_000, now + 700), kind: 'message' }, { clockSkewMs: 50 });
    expect(waited).toMatchObject({ budgetMs: 750, waitedMs: 250, source: 'header' });
    // The default allowance (10 ms); none with false; not read for an RPC call, nor alone: a budget is never made
    // from a wall clock.
    expect(start({ headers: sent(1_000, now + 700), kind: 'message' })).toMatchObject({ budgetMs: 710, waitedMs: 290 });
    expect(start({ headers: sent(1_000, now + 700), kind: 'message' }, { clockSkewMs: false })).toMatchObject({
      budgetMs: 1_000,
      waitedMs: 0,
    });
    expect(start({ headers: sent(1_000, now + 700) })).toMatchObject({ budgetMs: 1_000, waitedMs: 0 });
    expect(() => start({}, { clockSkewMs: -1 })).toThrow(/clockSkewMs/);
    expect(start({ headers: { 'x-request-deadline-at': String(now + 700) }, kind: 'message' })).toMatchObject({
      budgetMs: 15_000,
      source: 'default',
      waitedMs: 0,
    });
  });

  it('a consumer’s clock behind the publisher’s costs nothing; a message that waited out its budget is refused', () => {
    vi.spyOn(Date, 'now').mockReturnValue(now);
    expect(start({ headers: sent(1_000, now + 5_000), kind: 'message' }, { clockSkewMs: 50 })).toMatchObject({
      budgetMs: 1_000,
      waitedMs: 0,
    });
    const spent = start({ headers: sent(1_000, now - 2_000), kind: 'message' }, { clockSkewMs: 50 });
    expect(spent).toMatchObject({ budgetMs: 0, waitedMs: 1_000 });
    expect(spent.refusal?.message).toMatch(/no time left/);
    for (const hostile of ['', '-5', '1e12', 'x'.repeat(100), '99999999999999999']) {
      expect(start({ headers: sent(1_000, hostile), kind: 'message' }, { clockSkewMs: 50 })).toMatchObject({
        budgetMs: 1_000,
        waitedMs: 0,
      });
    }
  });
});

describe('a message nobody waits for (an event)', () => {
  it('runs without a deadline unless it carries one, which it may then have in full', () => {
    const event = { kind: 'message', awaited: false } as const;
    expect(start(event, { defaultMs: 1_000 })).toMatchObject({ budgetMs: 2 ** 31 - 1, source: 'default' });
    expect(start({ ...event, headers: { 'x-request-deadline': '60000' } }, { defaultMs: 1_000 })).toMatchObject({
      budgetMs: 60_000,
      source: 'header',
    });
    // A request (someone waits) keeps the service's limits; so does any RPC call, whatever `awaited` says.
    expect(start({ kind: 'message' }, { defaultMs: 1_000 }).budgetMs).toBe(1_000);
    expect(start({ awaited: false }, { defaultMs: 1_000 }).budgetMs).toBe(1_000);
  });
});

describe('a call with no time', () => {
  it('is refused, whatever minMs: a timeout of 0, a deadline already past, or spent by the lead', () => {
    for (const init of [
      { headers: { 'grpc-timeout': '0m' } },
      { headers: { 'connect-timeout-ms': '0' } },
      { ownMs: -2_147_483_296 },
      { ownMs: 1, leadMs: 10 },
    ]) {
      for (const minMs of [0, 10]) {
        const call = start(init, { minMs });
        expect(call.budgetMs, JSON.stringify(init)).toBe(0);
        expect(call.refusal).toBeInstanceOf(DeadlineExceededError);
        expect(call.refusal).toMatchObject({
          hop: 'inventory',
          message: '/inventory.Inventory/Reserve not started: no time left',
        });
      }
    }
  });

  it('is refused below minMs, saying so', () => {
    expect(start({ ownMs: 5 }, { minMs: 10 }).refusal?.message).toBe(
      "/inventory.Inventory/Reserve not started: 5 ms left, below this service's minimum of 10 ms",
    );
    expect(start({ ownMs: 10 }, { minMs: 10 }).refusal).toBeUndefined();
  });
});

describe("the protocol's signal", () => {
  const timedOut = new Error('the operation timed out');
  const abortMeans = (reason: unknown): 'deadline' | 'cancel' => (reason === timedOut ? 'deadline' : 'cancel');

  it('aborted by its own timer for the caller’s deadline: the context stops as this hop’s deadline', () => {
    const controller = new AbortController();
    const call = start({ ownMs: 300, signal: controller.signal, abortMeans });
    controller.abort(timedOut);
    const reason = call.context.stopReason;
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    expect(reason).toMatchObject({ hop: 'inventory', phase: 'in-handler', budgetMs: 300, cause: timedOut });
  });

  it('already aborted so when the call starts (a timeout of 0): the context starts stopped, as a deadline', () => {
    const controller = new AbortController();
    controller.abort(timedOut);
    const call = start({ headers: { 'connect-timeout-ms': '0' }, signal: controller.signal, abortMeans });
    expect(call.context.stopReason).toBeInstanceOf(DeadlineExceededError);
    expect(call.refusal).toBeInstanceOf(DeadlineExceededError);
  });

  it('aborted by a timer that cannot be right (ignore): the context keeps its own deadline', () => {
    const controller = new AbortController();
    const call = start({ ownMs: 2_000, signal: controller.signal, abortMeans: () => 'ignore' });
    controller.abort(timedOut);
    expect(call.context.stopReason).toBeUndefined();
    expect(call.context.remainingMs()).toBeGreaterThan(1_000);
    call.end(0);
  });

  it('aborted because the caller left, long before its deadline: cancelled, client-disconnected', () => {
    const controller = new AbortController();
    const call = start({ ownMs: 5_000, signal: controller.signal, abortMeans });
    controller.abort(new Error('stream reset'));
    const reason = call.context.stopReason;
    expect(reason).toBeInstanceOf(CancelledError);
    expect((reason as CancelledError).reason).toBe('client-disconnected');
  });
});

describe('the caller leaving', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('as its own deadline runs out is that deadline; well before it, a cancellation', () => {
    // The server anchors the caller's timeout late when it is busy: the caller's timer fires a little "early".
    const atTheDeadline = start({ ownMs: 300, leadMs: 10 });
    vi.advanceTimersByTime(230);
    atTheDeadline.callerLeft();
    expect(atTheDeadline.context.stopReason).toBeInstanceOf(DeadlineExceededError);
    const early = start({ ownMs: 300, leadMs: 10 });
    vi.advanceTimersByTime(150);
    early.callerLeft();
    expect(early.context.stopReason).toMatchObject({ reason: 'client-disconnected' });
    expect(early.context.stopReason).toBeInstanceOf(CancelledError);
    // Without a deadline of its own, the caller only ever leaves.
    const none = start({});
    none.callerLeft();
    expect(none.context.stopReason).toBeInstanceOf(CancelledError);
  });

  it('after the call ended is the protocol closing the exchange: leftover work stops, no cancellation is published', () => {
    const published: unknown[] = [];
    const onCancelled = (message: unknown) => published.push(message);
    diagnostics.subscribe(DiagnosticsChannel.Cancelled, onCancelled);
    try {
      const call = start({ ownMs: 5_000 });
      const stopped: unknown[] = [];
      call.context.onStop((reason) => stopped.push(reason));
      call.end(0);
      // Answered: the leftover work runs on (cancelOnEnd is off) until the protocol closes the exchange.
      expect(stopped).toEqual([]);
      call.callerLeft();
      expect(stopped).toHaveLength(1);
      expect(stopped[0]).toMatchObject({ reason: 'context-ended' });
      expect(published).toEqual([]);
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannel.Cancelled, onCancelled);
    }
  });
});
