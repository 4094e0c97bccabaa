/**
 * `deadlineAxios` on real sockets. What every HTTP client adapter must do is the shared suite's
 * (client-conformance.ts); here, what is axios's own: its interceptors ejected, a request sent again (as
 * axios-retry does), one call per request, its own timeout and error types.
 */
import { runWithDeadline } from '@deadline/core';
import axios, { type AxiosError, type AxiosInstance } from 'axios';
import { describe, expect, it } from 'vitest';
import { deadlineAxios } from '../src/axios.ts';
import { calls } from './calls.ts';
import { httpClientConformance } from './client-conformance.ts';
import { type Downstream, downstreamsPerTest, echo, exceededBy, silent } from './servers.ts';

/** A downstream on loopback, closed after each test. */
const downstream = downstreamsPerTest();

/** The success handler of a request that must fail. */
function unexpected(): never {
  throw new Error('the request succeeded');
}

function client(options?: Parameters<typeof deadlineAxios>[1]): AxiosInstance {
  const instance = axios.create();
  deadlineAxios(instance, options);
  return instance;
}

httpClientConformance<AxiosInstance>({
  name: 'axios',
  client,
  wrap: (options) => deadlineAxios(axios.create(), options),
  get: (instance, url, init = {}) => instance.get(url, init),
  json: async (instance, url, headers) => (await instance.get(url, headers === undefined ? {} : { headers })).data,
  expectCallerAbort: (error) => expect(axios.isCancel(error)).toBe(true),
});

describe('axios: its interceptors', () => {
  it('the eject function removes both interceptors', async () => {
    const server = await downstream(echo);
    const instance = axios.create();
    const eject = deadlineAxios(instance);
    eject();
    const res = await runWithDeadline(1_000, () => instance.get(server.url));
    expect(res.data['x-request-deadline']).toBeUndefined();
    expect(instance.interceptors.request.handlers?.filter(Boolean)).toHaveLength(0);
    expect(instance.interceptors.response.handlers?.filter(Boolean)).toHaveLength(0);
  });

  it('a request sent again (as axios-retry does) carries a fresh, smaller budget and the caller signal', async () => {
    // The first attempt fails with 503; the second hangs until the caller aborts.
    const server: Downstream = await downstream((socket) => {
      if (server.requests.length === 1) socket.write('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n');
    });
    const instance = client();
    const caller = new AbortController();
    const closed = server.nextClose();
    const error = await runWithDeadline(5_000, async () => {
      const first = await instance.get(server.url, { signal: caller.signal }).then(unexpected, (e: AxiosError) => e);
      expect(first.response?.status).toBe(503);
      // Let time pass between the attempts (a timer, not a synchronisation) so the budgets differ.
      await new Promise((resolve) => setTimeout(resolve, 20));
      const second = instance.request(first.config as NonNullable<AxiosError['config']>).catch((e: unknown) => e);
      await server.arrived(2);
      caller.abort();
      return second;
    });
    await closed;
    expect(axios.isCancel(error)).toBe(true);
    const [first, second] = server.requests.map((h) => Number(h['x-request-deadline']));
    expect(second).toBeLessThan(first as number);
  });
});

describe('each request is one call, ended with its outcome', () => {
  it('an answer, an error status, a downstream 504, a cut-off, a caller abort', async () => {
    const instance = client();
    const ok = await downstream(echo);
    expect(await calls(() => runWithDeadline(5_000, () => instance.get(ok.url)))).toEqual(['start', 'end ok 200']);
    const failing = await downstream((socket) =>
      socket.write('HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n'),
    );
    expect(await calls(() => runWithDeadline(5_000, () => instance.get(failing.url)))).toEqual([
      'start',
      'end error 500',
    ]);
    const tired = await downstream(exceededBy('inventory'));
    expect(await calls(() => runWithDeadline(5_000, () => instance.get(tired.url)))).toEqual([
      'start',
      'end deadline_exceeded 504',
    ]);
    const quiet = await downstream(silent);
    expect(await calls(() => runWithDeadline(200, () => instance.get(quiet.url)))).toEqual([
      'start',
      'end deadline_exceeded -',
    ]);
    const caller = new AbortController();
    const aborted = calls(() => runWithDeadline(5_000, () => instance.get(quiet.url, { signal: caller.signal })));
    await quiet.arrived(2);
    caller.abort();
    expect(await aborted).toEqual(['start', 'end error -']);
  });
});

describe('cut off at the deadline', () => {
  it("a caller's smaller timeout is kept (axios' own timeout error)", async () => {
    const server = await downstream(silent);
    const error = await runWithDeadline(10_000, () => client().get(server.url, { timeout: 200 })).then(
      unexpected,
      (e: AxiosError) => e,
    );
    expect(error.code).toBe('ECONNABORTED');
  });
});

describe("a downstream's own deadline", () => {
  it('with downstreamErrors: false it stays the AxiosError', async () => {
    const server = await downstream(exceededBy('inventory'));
    const error = await runWithDeadline(2_000, () => client({ downstreamErrors: false }).get(server.url)).then(
      unexpected,
      (e: AxiosError) => e,
    );
    expect(error.response?.status).toBe(504);
  });
});
