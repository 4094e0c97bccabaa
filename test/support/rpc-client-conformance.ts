/**
 * The behaviour every RPC adapter (@deadline/grpc over grpc-js, @deadline/connect over connect-node in either
 * protocol) must show on loopback, through the test service (test/fixtures/inventory.proto, whose handlers report
 * through rpc-seen.ts): outgoing calls bounded by the request's budget, refused without sending when none is left,
 * cancelled when the request stops, cut off locally; incoming calls' handlers in the context of their call's
 * deadline, answered deadline-exceeded naming the hop. Each adapter's test file runs it with its own driver, and
 * keeps beside it what is its client's own.
 */
import {
  CancelledError,
  createContext,
  DeadlineExceededError,
  findDeadlineError,
  runWithContext,
  runWithDeadline,
  traceFrom,
} from '@deadline/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { events, next, type Seen } from './rpc-seen.ts';

/** A test service on loopback. */
export interface RpcServed {
  /** What a client is made with: an address, a base URL. */
  target: string;
  close(): Promise<void>;
}

/** The service options the suite uses, each adapter's own options made from them. */
export interface RpcServiceOptions {
  serviceName: string;
  defaultMs?: number;
  maxMs?: number;
  minMs?: number;
  /**
   * Whom the service trusts to lengthen its budget: a caller that sends `x-internal: 1`, every caller, or none
   * (a predicate that throws).
   */
  trust?: 'internal' | 'all' | 'throws';
  /** Where the service's call lines go. */
  logger?: RpcLogger;
}

/** A logger of the service's call lines. */
export interface RpcLogger {
  info(line: object, message: string): void;
  warn(line: object, message: string): void;
}

/**
 * An adapter's service options made from the suite's: the same names, each set only when the suite sets it, and
 * `trust` made from {@link RpcServiceOptions.trust} with `internal`, how a request of type `Call` says it is.
 */
export function serviceOptionsOf<Call>(options: RpcServiceOptions, internal: (call: Call) => boolean) {
  return {
    serviceName: options.serviceName,
    ...(options.defaultMs === undefined ? {} : { defaultMs: options.defaultMs }),
    ...(options.maxMs === undefined ? {} : { maxMs: options.maxMs }),
    ...(options.minMs === undefined ? {} : { minMs: options.minMs }),
    ...trustOf<Call>(options.trust, internal),
    ...(options.logger === undefined ? {} : { logger: options.logger }),
  };
}

function trustOf<Call>(
  trust: RpcServiceOptions['trust'],
  internal: (call: Call) => boolean,
): { trust: (call: Call) => boolean } | Record<string, never> {
  if (trust === undefined) return {};
  if (trust === 'internal') return { trust: internal };
  if (trust === 'all') return { trust: () => true };
  return {
    trust: () => {
      throw new Error('broken predicate');
    },
  };
}

/** What the suite needs of an RPC adapter. */
export interface RpcClientDriver<Client> {
  /** The adapter (and protocol), as it appears in the suite's name. */
  name: string;
  /** Serves the test service: through the adapter unless `options` is `false`. */
  serve(options: RpcServiceOptions | false): Promise<RpcServed>;
  /** A client of the test service: through the adapter unless `options` is `false`. */
  client(target: string, options?: { marginMs?: number } | false): Client;
  /** Closes a client the suite is done with (grpc-js's; a Connect client has nothing to close). */
  close(client: Client): void;
  /** A unary `Inspect` call: `timeoutMs`, the call's own timeout (a deadline in grpc-js); `headers`, metadata. */
  inspect(
    client: Client,
    request: { wait?: boolean; detach?: boolean },
    options?: { timeoutMs?: number; headers?: Record<string, string> },
  ): Promise<Seen>;
  /** A client-streaming `Collect` call that sends `items`. */
  collect(client: Client, items: { n: number }[]): Promise<Seen>;
  /**
   * A server-streaming `Ticks` call, read to its end: the messages received and the error it ended with.
   * `onMessage` is told each tick, with a way to cancel the call from the client (grpc-js's `cancel()`, an abort
   * of the call's own signal).
   */
  ticks(
    client: Client,
    request: { count: number; intervalMs: number },
    onMessage?: (n: number, cancel: () => void) => void,
  ): Promise<{ received: number; error: unknown }>;
  /** Asserts `error` is the client library's own error type. */
  expectClientError(error: unknown): void;
  /** The status code of the client's error, and the codes the suite expects. */
  codeOf(error: unknown): unknown;
  codes: { deadlineExceeded: unknown; cancelled: unknown };
  /** The adapter's own reading of an error answered by a downstream's deadline (`fromGrpcStatus`, `fromConnectError`). */
  fromError(error: unknown): unknown;
  /** Asserts the error's trailers name `hop` in `x-deadline-exceeded-by`, as the client library reads them. */
  expectExceededBy(error: unknown, hop: string): void;
  /** Asserts what is the client's own about a call refused for lack of time (its error type, its channel). */
  expectRefusedUnsent(client: Client, error: unknown): void;
  /** What the service's call line says: its message, and its `code` for an answer and for a deadline exceeded. */
  log: { message: string; ok: unknown; deadlineExceeded: unknown };
  /** The least budget a handler can have been given (test support's `leftAfter`, with the adapter's own lead). */
  leftAfter(budgetMs: number, started: number, marginMs?: number): number;
}

/** The metadata a trusted caller sends. */
const internal = { 'x-internal': '1' };

/** Resolves with the call's error; rejects if it succeeds. */
const fail = (work: Promise<unknown>): Promise<unknown> =>
  work.then(
    () => {
      throw new Error('expected the call to fail');
    },
    (error: unknown) => error,
  );

export function rpcClientConformance<Client>(driver: RpcClientDriver<Client>): void {
  describe(`${driver.name}: deadline RPC conformance`, () => {
    let inventory: RpcServed;
    let bare: RpcServed;
    const clients: Client[] = [];
    const client = (target: string, options?: { marginMs?: number } | false): Client => {
      const made = driver.client(target, options);
      clients.push(made);
      return made;
    };

    beforeAll(async () => {
      inventory = await driver.serve({ serviceName: 'inventory', defaultMs: 1_500, maxMs: 5_000, trust: 'internal' });
      bare = await driver.serve(false);
    });
    afterAll(async () => {
      for (const c of clients) driver.close(c);
      await inventory?.close();
      await bare?.close();
    });

    /** Runs `test` with a service of `options` of its own, closed after. */
    async function withService(options: RpcServiceOptions, test: (served: RpcServed) => Promise<void>) {
      const served = await driver.serve(options);
      try {
        await test(served);
      } finally {
        await served.close();
      }
    }

    describe('an outgoing call', () => {
      it('carries the remaining budget less the margin as its deadline', async () => {
        const c = client(inventory.target, { marginMs: 50 });
        const started = performance.now();
        const seen = await runWithDeadline(800, () => driver.inspect(c, {}));
        expect(seen.budgetMs).toBeLessThanOrEqual(750);
        expect(seen.budgetMs).toBeGreaterThanOrEqual(driver.leftAfter(800, started, 50));
        expect(seen.hop).toBe('inventory');
      });

      it('keeps its own deadline when that is the earlier one', async () => {
        const c = client(inventory.target);
        const started = performance.now();
        const seen = await runWithDeadline(3_000, () => driver.inspect(c, {}, { timeoutMs: 400 }));
        expect(seen.budgetMs).toBeLessThanOrEqual(400);
        expect(seen.budgetMs).toBeGreaterThanOrEqual(driver.leftAfter(400, started));
      });

      it('is not made when too little is left: deadline exceeded at once, nothing sent', async () => {
        const c = client(inventory.target, { marginMs: 20 });
        let reached = 0;
        const onInspect = () => reached++;
        events.on('inspect', onInspect);
        const error = await fail(runWithDeadline(10, () => driver.inspect(c, {}))).finally(() =>
          events.off('inspect', onInspect),
        );
        expect(driver.codeOf(error)).toBe(driver.codes.deadlineExceeded);
        const typed = findDeadlineError(error);
        expect(typed).toBeInstanceOf(DeadlineExceededError);
        expect((typed as DeadlineExceededError).phase).toBe('before-call');
        expect(reached).toBe(0);
        driver.expectRefusedUnsent(c, error);
      });

      it("is cancelled when its request is: cancelled here, the handler's context cancelled there", async () => {
        const c = client(inventory.target);
        const ctx = createContext({ deadline: 5_000 });
        const stopped = next<unknown>('stopped');
        const call = fail(ctx.run(() => driver.inspect(c, { wait: true })));
        await next('inspect');
        ctx.cancel(new CancelledError('client went away', { reason: 'client-disconnected' }));
        const error = await call;
        expect(driver.codeOf(error)).toBe(driver.codes.cancelled);
        expect(findDeadlineError(error)).toBeInstanceOf(CancelledError);
        const reason = await stopped;
        expect(reason).toBeInstanceOf(CancelledError);
        expect((reason as CancelledError).reason).toBe('client-disconnected');
      });

      it('is cut off locally when its own share of the budget runs out', async () => {
        const c = client(bare.target, { marginMs: 20 });
        const started = performance.now();
        const error = await fail(runWithDeadline(300, () => driver.inspect(c, { wait: true })));
        const elapsed = performance.now() - started;
        expect(driver.codeOf(error)).toBe(driver.codes.deadlineExceeded);
        const typed = findDeadlineError(error) as DeadlineExceededError;
        expect(typed.whose).toBe('local');
        expect(typed.phase).toBe('during-call');
        expect(elapsed).toBeGreaterThan(250);
        expect(elapsed).toBeLessThan(2_000);
      });
    });

    describe('an incoming call', () => {
      it("runs its handler in a context of its deadline, its hop and its caller's trace", async () => {
        const c = client(inventory.target);
        const trace = traceFrom();
        const started = performance.now();
        const seen = await runWithContext({ deadline: 900, trace }, () => driver.inspect(c, {}));
        expect(seen.budgetMs).toBeLessThanOrEqual(900);
        expect(seen.budgetMs).toBeGreaterThanOrEqual(driver.leftAfter(900, started));
        expect(seen.traceId).toBe(trace.traceId);
      });

      it('gets the service default without a deadline; any caller may shorten it, a trusted one lengthen it', async () => {
        const c = client(inventory.target, false);
        expect((await driver.inspect(c, {})).budgetMs).toBeCloseTo(1_500, 6);
        const started = performance.now();
        const shorter = await driver.inspect(c, {}, { timeoutMs: 800 });
        expect(shorter.budgetMs).toBeLessThanOrEqual(800);
        expect(shorter.budgetMs).toBeGreaterThanOrEqual(driver.leftAfter(800, started));
        // Asking for more than the default: only a trusted caller gets it, up to the maximum.
        expect((await driver.inspect(c, {}, { timeoutMs: 60_000 })).budgetMs).toBeCloseTo(1_500, 6);
        const trusted = await driver.inspect(c, {}, { timeoutMs: 60_000, headers: internal });
        expect(trusted.budgetMs).toBeCloseTo(5_000, 6);
      });

      it('is answered deadline exceeded naming this hop when its own (clamped) deadline passes first', async () => {
        await withService({ serviceName: 'stock', maxMs: 150 }, async (tight) => {
          const c = client(tight.target);
          const stopped = next<unknown>('stopped');
          const error = await fail(runWithDeadline(5_000, () => driver.inspect(c, { wait: true })));
          expect(driver.codeOf(error)).toBe(driver.codes.deadlineExceeded);
          driver.expectExceededBy(error, 'stock');
          expect((findDeadlineError(error) as DeadlineExceededError).whose).toBe('downstream:stock');
          expect(driver.fromError(error)).toMatchObject({ whose: 'downstream:stock' });
          expect(await stopped).toBeInstanceOf(DeadlineExceededError);
        });
      });

      it('is refused before its handler runs when less than minMs is left', async () => {
        // The caller's 1 s is below the 2 s minimum, and leaves the refusal time to come back before the caller's
        // own timer fires, however slow the machine (with 100 ms, a loaded one's connection took longer, and the
        // caller's timer answered instead, naming no one).
        await withService({ serviceName: 'strict', minMs: 2_000 }, async (strict) => {
          const c = client(strict.target, false);
          let ran = false;
          const ranInspect = () => {
            ran = true;
          };
          events.on('inspect', ranInspect);
          const error = await fail(driver.inspect(c, {}, { timeoutMs: 1_000 })).finally(() =>
            events.off('inspect', ranInspect),
          );
          expect(driver.codeOf(error)).toBe(driver.codes.deadlineExceeded);
          driver.expectExceededBy(error, 'strict');
          expect(ran).toBe(false);
        });
      });

      it('lets detached work escape the deadline and keep the trace', async () => {
        const c = client(inventory.target);
        const trace = traceFrom();
        const seen = await runWithContext({ deadline: 900, trace }, () => driver.inspect(c, { detach: true }));
        expect(seen.detachedTraceId).toBe(trace.traceId);
        expect(seen.detachedHasDeadline).toBe(false);
      });

      it('reads a client stream in its context: the listeners its handler puts on the call run in it', async () => {
        const c = client(inventory.target);
        const collected = next<{ hop?: string } | undefined>('collected');
        const reply = await runWithDeadline(2_000, () => driver.collect(c, [{ n: 1 }, { n: 2 }]));
        expect(reply.count).toBe(2);
        expect((await collected)?.hop).toBe('inventory');
      });
    });

    describe("the service's options", () => {
      it('trust: any caller may shorten the default, only a trusted one lengthen it (up to maxMs)', async () => {
        const lines: Record<string, unknown>[] = [];
        const record = (line: object) => lines.push(line as Record<string, unknown>);
        const logger = { info: record, warn: record };
        const options = {
          serviceName: 'inventory',
          defaultMs: 1_234,
          maxMs: 5_000,
          trust: 'internal',
          logger,
        } as const;
        await withService(options, async (server) => {
          const c = client(server.target);
          const inspect = (ms: number, headers: Record<string, string> = {}) =>
            runWithDeadline(ms, () => driver.inspect(c, {}, { headers }));
          // Untrusted, shorter than the default: honoured.
          let started = performance.now();
          const shorter = await inspect(800);
          expect(shorter.budgetMs).toBeLessThanOrEqual(800);
          expect(shorter.budgetMs).toBeGreaterThanOrEqual(driver.leftAfter(800, started));
          // Untrusted, longer: the default, and the line says what was asked.
          started = performance.now();
          expect((await inspect(3_000)).budgetMs).toBeCloseTo(1_234, 6);
          const askedAtLeast = driver.leftAfter(3_000, started);
          // Trusted: as long as it asks, up to maxMs.
          started = performance.now();
          const trusted = await inspect(3_000, internal);
          expect(trusted.budgetMs).toBeLessThanOrEqual(3_000);
          expect(trusted.budgetMs).toBeGreaterThanOrEqual(driver.leftAfter(3_000, started));
          expect((await inspect(60_000, internal)).budgetMs).toBeCloseTo(5_000, 6);
          await expect.poll(() => lines.length).toBe(4);
          expect(lines[0]).toMatchObject({ budgetSource: 'header' });
          expect(lines[0]?.requestedMs).toBeUndefined();
          expect(lines[1]).toMatchObject({ budgetSource: 'default', budgetMs: 1_234 });
          expect(lines[1]?.requestedMs).toBeGreaterThanOrEqual(askedAtLeast);
          expect(lines[2]).toMatchObject({ budgetSource: 'header' });
          expect(lines[3]).toMatchObject({ budgetSource: 'header', budgetMs: 5_000 });
          expect(lines[3]?.requestedMs).toBeGreaterThan(55_000);
        });
      });

      it('a throwing trust predicate counts as untrusted: it may shorten the default, not lengthen it', async () => {
        await withService({ serviceName: 'inventory', defaultMs: 1_111, trust: 'throws' }, async (server) => {
          const c = client(server.target);
          expect((await runWithDeadline(3_000, () => driver.inspect(c, {}))).budgetMs).toBeCloseTo(1_111, 6);
          const started = performance.now();
          const shorter = await runWithDeadline(800, () => driver.inspect(c, {}));
          expect(shorter.budgetMs).toBeLessThanOrEqual(800);
          expect(shorter.budgetMs).toBeGreaterThanOrEqual(driver.leftAfter(800, started));
        });
      });

      it('logger: one line per call, with its method, budget, outcome and code', async () => {
        const lines: { level: string; line: Record<string, unknown>; message: string }[] = [];
        const logger = {
          info: (line: object, message: string) =>
            lines.push({ level: 'info', line: line as Record<string, unknown>, message }),
          warn: (line: object, message: string) =>
            lines.push({ level: 'warn', line: line as Record<string, unknown>, message }),
        };
        // Trusted, so that its 2 s are clamped to maxMs (an untrusted caller gets the default, 100 ms here as well).
        await withService({ serviceName: 'stock', maxMs: 100, trust: 'all', logger }, async (server) => {
          const c = client(server.target);
          await runWithDeadline(2_000, () => driver.inspect(c, {}));
          await runWithDeadline(2_000, () => driver.inspect(c, { wait: true })).catch(() => {});
          await expect.poll(() => lines.length).toBe(2);
          expect(lines[0]).toMatchObject({
            level: 'info',
            message: driver.log.message,
            line: {
              hop: 'stock',
              method: '/deadline.test.Inventory/Inspect',
              budgetMs: 100,
              budgetSource: 'header',
              outcome: 'ok',
              code: driver.log.ok,
            },
          });
          expect(lines[0]?.line.requestedMs).toBeGreaterThan(100);
          expect(lines[1]).toMatchObject({
            level: 'warn',
            line: { outcome: 'deadline_exceeded', code: driver.log.deadlineExceeded, exceededBy: 'stock' },
          });
        });
      });
    });
  });
}

/** Server streams under the deadline: bounded as a whole by their call's deadline, stopped when the caller cancels. */
export function rpcStreamConformance<Client>(driver: RpcClientDriver<Client>): void {
  describe(`${driver.name}: a server stream under the deadline`, () => {
    const clients: Client[] = [];
    const client = (target: string): Client => {
      const made = driver.client(target);
      clients.push(made);
      return made;
    };

    /**
     * The most the service allows a call, stream and all: the cut the bounded stream below ends at. A second, not
     * less, so that a stream of 20 ms ticks has sent some before it (a stall of a few hundred ms on a loaded
     * machine leaves most of them), while the caller's own 5 s stay far off.
     */
    const MAX_MS = 1_000;
    /** The interval of the ticks of a stream that runs until it is cut. */
    const TICK_MS = 20;
    /** What the caller allows a stream that runs until it is cut: far more than the service's {@link MAX_MS}. */
    const CALLER_MS = 5_000;
    /**
     * What a stream that must end normally is allowed, by the caller and by its service: its 100 ticks of 1 ms
     * take ~150 ms alone and took 550 ms with both cores busy; 20 s leave it no way to run out, however slow the
     * machine.
     */
    const ROOMY_MS = 20_000;

    let bounded: RpcServed;
    /** The same service, with room for any stream that ends by itself. */
    let roomy: RpcServed;
    beforeAll(async () => {
      bounded = await driver.serve({ serviceName: 'inventory', maxMs: MAX_MS });
      roomy = await driver.serve({ serviceName: 'inventory', maxMs: ROOMY_MS });
    });
    afterAll(async () => {
      for (const c of clients) driver.close(c);
      await bounded?.close();
      await roomy?.close();
    });

    it('is bounded as a whole: it ends deadline exceeded at its deadline, naming the hop, and the work stops', async () => {
      const c = client(bounded.target);
      const stopped = next<{ reason: unknown; n: number }>('ticks-stopped');
      const started = performance.now();
      // The caller allows 5 s; the service allows a call MAX_MS at most, stream and all.
      const { received, error } = await runWithDeadline(CALLER_MS, () =>
        driver.ticks(c, { count: 0, intervalMs: TICK_MS }),
      );
      const elapsed = performance.now() - started;
      expect(received).toBeGreaterThan(3);
      driver.expectClientError(error);
      expect(driver.codeOf(error)).toBe(driver.codes.deadlineExceeded);
      driver.expectExceededBy(error, 'inventory');
      expect((findDeadlineError(error) as DeadlineExceededError).whose).toBe('downstream:inventory');
      expect(elapsed).toBeGreaterThan(MAX_MS - 50);
      // Ended by the service's cut (the error names it), never by the caller's own deadline.
      expect(elapsed).toBeLessThan(CALLER_MS);
      const { reason, n } = await stopped;
      expect(reason).toBeInstanceOf(DeadlineExceededError);
      // The handler's timer went with its context: the last tick is one a MAX_MS stream had time for, never one
      // of a stream that ran on past its cut (twice as many as fit, a margin: a slow machine only makes fewer).
      expect(n).toBeLessThan((2 * MAX_MS) / TICK_MS);
      expect(n).toBeGreaterThanOrEqual(received);
    });

    it("stops the server's work when the client cancels mid-stream", async () => {
      const c = client(bounded.target);
      const stopped = next<{ reason: unknown; n: number }>('ticks-stopped');
      const request = createContext({ deadline: 5_000 });
      const { error } = await request.run(() =>
        driver.ticks(c, { count: 0, intervalMs: 10 }, (n, cancel) => {
          if (n === 3) cancel();
        }),
      );
      request.end();
      expect(driver.codeOf(error)).toBe(driver.codes.cancelled);
      const { reason, n } = await stopped;
      expect(reason).toBeInstanceOf(CancelledError);
      expect((reason as CancelledError).reason).toBe('client-disconnected');
      expect(n).toBeLessThan(40);
    });

    it("stops the server's work when the client's request is cancelled mid-stream", async () => {
      const c = client(bounded.target);
      const stopped = next<{ reason: unknown; n: number }>('ticks-stopped');
      const request = createContext({ deadline: 5_000 });
      const { error } = await request.run(() =>
        driver.ticks(c, { count: 0, intervalMs: 10 }, (n) => {
          if (n === 3) request.cancel(new CancelledError('client went away', { reason: 'client-disconnected' }));
        }),
      );
      expect(driver.codeOf(error)).toBe(driver.codes.cancelled);
      expect(findDeadlineError(error)).toBeInstanceOf(CancelledError);
      expect((await stopped).reason).toBeInstanceOf(CancelledError);
    });

    it('ends normally when it finishes in time', async () => {
      const c = client(roomy.target);
      const { received, error } = await runWithDeadline(ROOMY_MS, () => driver.ticks(c, { count: 100, intervalMs: 1 }));
      expect(error).toBeUndefined();
      expect(received).toBe(100);
    });
  });
}
