/**
 * retry() on real sockets: attempts inside the one budget, backoff cut short by a cancel, only what is worth
 * retrying retried, and a retry budget that keeps a failing downstream's load near 1× instead of 3×.
 */
import { CancelledError, createContext, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { downstreamsPerTest, httpServer, refusedUrl, silent } from '../../http/test/servers.ts';
import { watchingTheLoop } from '../../server/test/loop-lateness.ts';
import { RetryBudget, retry } from '../src/index.ts';

const downstream = downstreamsPerTest();

/** The per-attempt cap of the test that counts attempts inside a budget. */
const PER_ATTEMPT_MS = 1_000;
/**
 * Its budget: one full attempt and half of another. The second is given the ~500 ms left, which a stall of a few
 * hundred ms before it cannot take below the 10 ms an attempt needs to start; and the budget's end at 1.5 s comes
 * 500 ms before the 2 s that a fresh timeout per attempt would take.
 */
const BUDGET_MS = 1_500;

describe('retry()', () => {
  it('per-attempt timeout 1 s under a 1.5 s budget: exactly 2 attempts, failure near 1.5 s', async () => {
    const server = await downstream(silent);
    const attempts: number[] = [];
    const {
      value: { error, elapsed },
      stalledMs,
    } = await watchingTheLoop(async () => {
      const started = performance.now();
      const error = await runWithDeadline(BUDGET_MS, () =>
        retry(
          (attempt, signal) => {
            attempts.push(attempt);
            return request(server.url, { signal });
          },
          { attempts: 5, perAttemptTimeoutMs: PER_ATTEMPT_MS, baseDelayMs: 20 },
        ),
      ).catch((e: unknown) => e);
      return { error, elapsed: performance.now() - started };
    });
    // The second attempt ends with the request's own deadline, which is never retried: 2 of the 5.
    expect(attempts).toEqual([1, 2]);
    expect(server.requests).toHaveLength(2);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(elapsed).toBeGreaterThanOrEqual(BUDGET_MS - 10);
    // Never a second fresh PER_ATTEMPT_MS: ended at the budget, later only by what this process's loop lost to stalls.
    expect(elapsed - stalledMs).toBeLessThan(2 * PER_ATTEMPT_MS);
  });

  it('attempts means attempts: 3 is at most 3 calls', async () => {
    const refused = await refusedUrl();
    let calls = 0;
    const error = await retry(
      () => {
        calls++;
        return request(refused);
      },
      { attempts: 3, baseDelayMs: 1 },
    ).catch((e: unknown) => e);
    expect(calls).toBe(3);
    expect(error).toMatchObject({ code: 'ECONNREFUSED' });
  });

  it('cancel during the backoff: settles at once, before the event loop runs anything else; no further attempt', async () => {
    const refused = await refusedUrl();
    const ctx = createContext({ root: true, deadline: 60_000 });
    let calls = 0;
    let cancelledAt = 0;
    // Set by a 0 ms timer armed at the cancel, the first callback the event loop runs after it (a timer, I/O): a
    // retry that settles with the cancel itself, in its promise callbacks, has settled before. That holds however
    // slow the machine is, where a time in ms would not.
    let aTurnWentBy = false;
    const started = ctx.run(() =>
      retry(
        () => {
          calls++;
          return request(refused);
        },
        {
          attempts: 5,
          baseDelayMs: 30_000,
          maxDelayMs: 30_000,
          random: () => 0.99,
          onRetry: () => {
            setImmediate(() => {
              cancelledAt = performance.now();
              ctx.cancel(new CancelledError('client left', { reason: 'client-disconnected' }));
              setTimeout(() => {
                aTurnWentBy = true;
              }, 0);
            });
          },
        },
      ).catch((e: unknown) => e),
    );
    const error = await started;
    const settledIn = performance.now() - cancelledAt;
    expect(error).toBeInstanceOf(CancelledError);
    expect(calls).toBe(1);
    expect(aTurnWentBy).toBe(false);
    console.log(`retry: cancel during backoff settled in ${settledIn.toFixed(2)} ms`);
  });

  it("the caller's own signal ends the retrying too", async () => {
    const refused = await refusedUrl();
    const controller = new AbortController();
    let calls = 0;
    const pending = retry(
      () => {
        calls++;
        return request(refused);
      },
      {
        attempts: 5,
        baseDelayMs: 30_000,
        signal: controller.signal,
        onRetry: () => setImmediate(() => controller.abort()),
      },
    ).catch((e: unknown) => e);
    expect(await pending).toBeInstanceOf(Error);
    expect(calls).toBe(1);
  });

  it('4xx is never retried; 503 is, and the last 503 is returned as it is', async () => {
    let hits = 0;
    let status = 400;
    const server = await httpServer((_req, res) => {
      hits++;
      res.statusCode = status;
      res.end('x');
    });
    try {
      const first = await retry(() => request(server.url), { attempts: 3, baseDelayMs: 1 });
      expect(first.statusCode).toBe(400);
      expect(hits).toBe(1);
      await first.body.dump();
      status = 503;
      const second = await retry(() => request(server.url), { attempts: 3, baseDelayMs: 1 });
      expect(second.statusCode).toBe(503);
      expect(await second.body.text()).toBe('x');
      expect(hits).toBe(4);
    } finally {
      await server.close();
    }
  });

  it('Retry-After is honoured when it fits in the budget, and ends the retrying when it does not', async () => {
    let hits = 0;
    let retryAfter = '1';
    const server = await httpServer((_req, res) => {
      hits++;
      res.statusCode = hits === 1 ? 503 : 200;
      res.setHeader('retry-after', retryAfter);
      res.end();
    });
    try {
      let started = performance.now();
      const ok = await runWithDeadline(5_000, () => retry(() => request(server.url), { baseDelayMs: 1 }));
      expect(ok.statusCode).toBe(200);
      expect(performance.now() - started).toBeGreaterThanOrEqual(990);
      hits = 0;
      retryAfter = '10';
      started = performance.now();
      let waits = 0;
      const answer = await runWithDeadline(2_000, () =>
        retry(() => request(server.url), { baseDelayMs: 1, onRetry: () => waits++ }),
      );
      // 10 s does not fit in 2 s: the 503 is the answer, at once — no wait begun (onRetry comes before each), and
      // answered well before the 2 s a wait cut short by the budget would have taken.
      expect(answer.statusCode).toBe(503);
      expect(waits).toBe(0);
      expect(performance.now() - started).toBeLessThan(1_500);
      expect(hits).toBe(1);
    } finally {
      await server.close();
    }
  });

  it('a call that may have reached the server is not retried unless idempotent; a refused one is', async () => {
    const reset = await downstream((socket) => socket.destroy());
    let calls = 0;
    const error = await retry(
      () => {
        calls++;
        return request(reset.url, { method: 'POST', body: 'order' });
      },
      { attempts: 3, baseDelayMs: 1, idempotent: false },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect(calls).toBe(1);
    const refused = await refusedUrl();
    calls = 0;
    await retry(
      () => {
        calls++;
        return request(refused, { method: 'POST', body: 'order' });
      },
      { attempts: 3, baseDelayMs: 1, idempotent: false },
    ).catch(() => {});
    expect(calls).toBe(3);
  });

  it('our own request deadline is never retried: the request has nothing left', async () => {
    const server = await downstream(silent);
    let calls = 0;
    const error = await runWithDeadline(200, () =>
      retry(
        (_attempt, signal) => {
          calls++;
          return request(server.url, { signal });
        },
        { attempts: 5 },
      ),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(calls).toBe(1);
  });

  it('no time for another attempt after the wait: the error says the budget ran out, the last cause attached', async () => {
    const refused = await refusedUrl();
    // 5 s: room for the refused attempt however slow the machine (it must fail by itself, not by the budget), and
    // still short of the ~9.9 s wait that follows it.
    const error = (await runWithDeadline(5_000, () =>
      retry(() => request(refused), {
        attempts: 5,
        baseDelayMs: 10_000,
        maxDelayMs: 10_000,
        random: () => 0.99,
        target: 'inventory',
      }),
    ).catch((e: unknown) => e)) as DeadlineExceededError;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error.phase).toBe('before-call');
    expect(error.message).toMatch(/budget ran out after 1 attempt to inventory/);
    expect(error.cause).toMatchObject({ code: 'ECONNREFUSED' });
  });

  it('a downstream failing 100 % under a 10 % retry budget: ≤ 1.1 attempts per request over 1,000 requests', async () => {
    let hits = 0;
    const server = await httpServer((_req, res) => {
      hits++;
      res.statusCode = 503;
      res.end();
    });
    try {
      // On a clock that stands still: the ratio is what is under test, and 1,000 requests on a loaded machine may
      // take longer than the budget's 10 s window, whose turnover would change the count.
      const budget = new RetryBudget({ ratio: 0.1, minRetriesPerSecond: 0, now: () => 0 });
      for (let i = 0; i < 1_000; i++) {
        const response = await retry(() => request(server.url), { attempts: 3, baseDelayMs: 0, retryBudget: budget });
        await response.body.dump();
      }
      const perRequest = hits / 1_000;
      console.log(`retry budget 10 %: ${perRequest.toFixed(3)} attempts per request (without it: 3)`);
      expect(perRequest).toBeLessThanOrEqual(1.1);
      expect(perRequest).toBeGreaterThan(1.05);
    } finally {
      await server.close();
    }
  });

  it('bad options are refused, naming them', async () => {
    await expect(retry(() => 1, { attempts: 0 })).rejects.toThrow(/attempts/);
    await expect(retry(() => 1, { perAttemptTimeoutMs: -1 })).rejects.toThrow(/perAttemptTimeoutMs/);
    await expect(retry(() => 1, { signal: 'x' as never })).rejects.toThrow(/signal/);
    await expect(retry('x' as never)).rejects.toThrow(/fn/);
  });
});

describe('retry() and response bodies', () => {
  it('a response returned by an attempt can be read after retry() returns (the attempt is not ended under it)', async () => {
    const server = await httpServer((_req, res) => {
      res.write('first half, ');
      setTimeout(() => res.end('second half'), 50);
    });
    const { createFetch } = await import('@deadline/http');
    const fetch = createFetch();
    try {
      // As a handler would: the body is read after retry() returned, inside the same request.
      const text = await runWithDeadline(2_000, async () => {
        const response = await retry((_attempt, signal) => fetch(server.url, { signal: signal ?? null }), {
          perAttemptTimeoutMs: 1_000,
        });
        return response.text();
      });
      expect(text).toBe('first half, second half');
    } finally {
      await server.close();
    }
  });

  it('an error wrapped by the global fetch is still understood: an attempt timeout is retried', async () => {
    const server = await downstream(silent);
    let calls = 0;
    const { installGlobalDispatcher } = await import('@deadline/http');
    const uninstall = installGlobalDispatcher();
    try {
      // Three attempts of 150 ms in a budget with room for them however slow the machine: each ends by its own cap.
      const error = await runWithDeadline(10_000, () =>
        retry(
          (_attempt, signal) => {
            calls++;
            return globalThis.fetch(server.url, { signal: signal ?? null });
          },
          { attempts: 3, perAttemptTimeoutMs: 150, baseDelayMs: 1 },
        ),
      ).catch((e: unknown) => e);
      expect(calls).toBe(3);
      expect(error).toBeInstanceOf(Error);
    } finally {
      uninstall();
    }
  });

  it('a 503 to a call that is not idempotent is not sent again', async () => {
    let hits = 0;
    const server = await httpServer((_req, res) => {
      hits++;
      res.statusCode = 503;
      res.end();
    });
    try {
      const response = await retry(() => request(server.url, { method: 'POST' }), {
        idempotent: false,
        baseDelayMs: 1,
      });
      expect(response.statusCode).toBe(503);
      await response.body.dump();
      expect(hits).toBe(1);
    } finally {
      await server.close();
    }
  });
});
