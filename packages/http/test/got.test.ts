/**
 * `deadlineGot` on real sockets. What every HTTP client adapter must do is the shared suite's
 * (client-conformance.ts); here, what is got's own: its retries (each attempt one call, with a fresh budget), its
 * cache, its error types.
 */
import http from 'node:http';
import { DeadlineExceededError, runWithDeadline } from '@deadline/core';
import got, { type Got, type RequestError } from 'got';
import { describe, expect, it } from 'vitest';
import { deadlineGot } from '../src/got.ts';
import { calls } from './calls.ts';
import { httpClientConformance } from './client-conformance.ts';
import { type Downstream, downstreamsPerTest, echo, exceededBy, silent } from './servers.ts';

/** A downstream on loopback, closed after each test. */
const downstream = downstreamsPerTest();

/** The success handler of a request that must fail. */
function unexpected(): never {
  throw new Error('the request succeeded');
}

function client(options?: Parameters<typeof deadlineGot>[0]): Got {
  return got.extend(deadlineGot(options));
}

const json = (instance: Got, url: string, headers?: Record<string, string>) =>
  instance.get(url, headers === undefined ? {} : { headers }).json<Record<string, string>>();

/** A retry after `delayMs` on 503s and resets, instead of got's default backoff of a second or more. */
const quickRetry = (delayMs: number) => ({
  retry: { limit: 1, calculateDelay: ({ computedValue }: { computedValue: number }) => (computedValue ? delayMs : 0) },
});

httpClientConformance<Got>({
  name: 'got',
  client,
  wrap: (options) => deadlineGot(options),
  get: (instance, url, init = {}) => instance.get(url, init),
  json: (instance, url, headers) => json(instance, url, headers),
  expectCallerAbort: (error) => expect((error as RequestError).name).toBe('AbortError'),
});

describe('got: its own retries', () => {
  it("a retry by got's own retry carries a fresh, smaller budget", async () => {
    const server: Downstream = await downstream((socket, headers) => {
      if (server.requests.length === 1) {
        socket.write('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      echo(socket, headers, '');
    });
    const instance = client().extend(quickRetry(20));
    const seen = await runWithDeadline(5_000, () => json(instance, server.url));
    expect(seen['x-request-deadline']).toBeDefined();
    const [first, second] = server.requests.map((h) => Number(h['x-request-deadline']));
    expect(second).toBeLessThan(first as number);
  });

  it("a retry of a request queued behind another's socket carries its own request's budget", async () => {
    // One socket for two requests: B waits for the socket A holds, and is sent from A's callbacks. B is reset,
    // and got's retry of B is scheduled from that socket's callbacks.
    let releaseA: (() => void) | undefined;
    const once = (release: (() => void) | undefined) => {
      releaseA = undefined;
      release?.();
    };
    const server: Downstream = await downstream((socket, headers) => {
      const n = server.requests.length;
      if (n === 1) releaseA = () => echo(socket, headers, '');
      else if (n === 2) socket.destroy();
      else echo(socket, headers, '');
    });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const instance = client().extend(quickRetry(10), { agent: { http: agent } });
    try {
      const a = runWithDeadline(60_000, () => json(instance, server.url));
      await server.arrived(1);
      const b = runWithDeadline(2_000, () =>
        // Answer A once B is queued behind it (B's request function has run when the answer arrives).
        json(instance.extend({ hooks: { beforeRequest: [() => once(releaseA)] } }), server.url),
      );
      await a;
      const seen = await b;
      expect(server.requests).toHaveLength(3);
      expect(Number(server.requests[1]?.['x-request-deadline'])).toBeLessThanOrEqual(2_000);
      expect(Number(seen['x-request-deadline'])).toBeLessThanOrEqual(2_000);
    } finally {
      agent.destroy();
    }
  });
});

describe('each attempt is one call, ended with its outcome', () => {
  it('a redirect, then a 503 retried, then the answer: three calls, each ended', async () => {
    const server: Downstream = await downstream((socket, headers) => {
      const n = server.requests.length;
      if (n === 1) socket.write('HTTP/1.1 302 Found\r\nlocation: /next\r\ncontent-length: 0\r\n\r\n');
      else if (n === 2) socket.write('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n');
      else echo(socket, headers, '');
    });
    const instance = client().extend(quickRetry(10));
    const events = await calls(() => runWithDeadline(5_000, () => json(instance, server.url)));
    expect(events).toEqual(['start', 'end ok 302', 'start', 'end error 503', 'start', 'end ok 200']);
    const budgets = server.requests.map((h) => Number(h['x-request-deadline']));
    expect(budgets.every((b) => b > 0 && b <= 5_000)).toBe(true);
  });

  it('a reset retried; a cut-off; a downstream 504', async () => {
    const reset: Downstream = await downstream((socket, headers) => {
      if (reset.requests.length === 1) socket.destroy();
      else echo(socket, headers, '');
    });
    const instance = client().extend(quickRetry(10));
    expect(await calls(() => runWithDeadline(5_000, () => json(instance, reset.url)))).toEqual([
      'start',
      'end error -',
      'start',
      'end ok 200',
    ]);
    const quiet = await downstream(silent);
    expect(await calls(() => runWithDeadline(200, () => instance.get(quiet.url)))).toEqual([
      'start',
      'end deadline_exceeded -',
    ]);
    const tired = await downstream(exceededBy('inventory'));
    expect(await calls(() => runWithDeadline(5_000, () => instance.get(tired.url)))).toEqual([
      'start',
      'end deadline_exceeded 504',
    ]);
  });
});

describe('cut off at the deadline', () => {
  const BUDGET = 300;

  it('with a `cache`, the call is cut all the same', async () => {
    const server = await downstream(silent);
    const closed = server.nextClose();
    const error = await runWithDeadline(BUDGET, () => client().get(server.url, { cache: new Map() })).catch(
      (e: unknown) => e,
    );
    await closed;
    expect(error).toBeInstanceOf(DeadlineExceededError);
  });
});

describe("a downstream's own deadline", () => {
  it('with downstreamErrors: false it stays an HTTPError', async () => {
    const server = await downstream(exceededBy('inventory'));
    const error = await runWithDeadline(2_000, () =>
      client({ downstreamErrors: false }).get(server.url, { retry: { limit: 0 } }),
    ).then(unexpected, (e: RequestError) => e);
    expect(error.name).toBe('HTTPError');
    expect(error.response?.statusCode).toBe(504);
  });
});
