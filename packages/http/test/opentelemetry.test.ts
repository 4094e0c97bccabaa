/**
 * With OpenTelemetry's W3C propagator registered, no client this package wraps writes `traceparent` or
 * `tracestate` (OpenTelemetry's instrumentations write theirs); the budget still goes. Without it, they do.
 * What the downstream received, on a real socket, for fetch/undici, node:http, axios and got.
 */
import http from 'node:http';
import { runWithContext, traceFrom } from '@deadline/core';
import { propagation } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import axios from 'axios';
import got from 'got';
import { Agent } from 'undici';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createFetch, deadlineAxios, deadlineGot, prepareHttpRequest } from '../src/index.ts';
import { downstreamsPerTest, echo } from './servers.ts';

const downstream = downstreamsPerTest();
const CALLER = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

afterEach(() => propagation.disable());

function nodeHttp(url: string): Promise<Record<string, string>> {
  const call = prepareHttpRequest('GET', url);
  return new Promise((resolve, reject) => {
    const req = http.request(url, { headers: call.headers, signal: call.signal, timeout: call.timeout }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        body += chunk;
      });
      res.on('end', () => {
        call.done(res);
        resolve(JSON.parse(body));
      });
    });
    req.on('error', reject);
    req.end();
  });
}

const agent = new Agent();
const instance = axios.create();
deadlineAxios(instance);
const gotClient = got.extend(deadlineGot());
const fetchIt = createFetch({ dispatcher: agent });
afterAll(() => agent.close());

const clients: Record<string, (url: string) => Promise<Record<string, string>>> = {
  'fetch/undici': async (url) => (await fetchIt(url)).json() as Promise<Record<string, string>>,
  'node:http': nodeHttp,
  axios: async (url) => (await instance.get(url)).data,
  got: (url) => gotClient(url).json(),
};

describe.each(Object.entries(clients))('%s', (_, send) => {
  const seen = async () => {
    const server = await downstream(echo);
    return runWithContext({ deadline: 1_000, trace: traceFrom(CALLER, 'v=1') }, () => send(server.url));
  };

  it('the W3C propagator registered: no traceparent or tracestate from the library; the budget goes', async () => {
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    const headers = await seen();
    expect(headers.traceparent).toBeUndefined();
    expect(headers.tracestate).toBeUndefined();
    expect(Number(headers['x-request-deadline'])).toBeLessThanOrEqual(1_000);
  });

  it('nothing registered: the library’s own traceparent and tracestate', async () => {
    const headers = await seen();
    expect(headers.traceparent).toMatch(/^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/);
    expect(headers.tracestate).toBe('v=1');
  });
});
