/**
 * fastify's own deadline (5.8 and later) under the plugin: `handlerTimeout` and `request.signal`. The smaller of the
 * handler timeout and the budget bounds the request, with one answer — the plugin's 504 naming the hop, never
 * fastify's `FST_ERR_HANDLER_TIMEOUT` — and `request.signal` aborts with the request's deadline (its reason the
 * context's own) and when the client leaves, so work given it stops with the rest; never after the response.
 */

import diagnostics from 'node:diagnostics_channel';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  CancelledError,
  type DeadlineContext,
  DeadlineExceededError,
  findDeadlineError,
  isDeadlineExceededError,
} from '@deadline/core';
import { REQUEST_END_CHANNEL, type RequestLine } from '@deadline/server';
import Fastify, { type FastifyInstance } from 'fastify';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LogLine, memoryDestination } from '../../server/test/harness.ts';
import fastifyDeadline from '../src/index.ts';

/**
 * The budget of a request that must get somewhere before its deadline (its downstream call made, its answer sent):
 * a second, which a loaded machine cannot use up first (150 and 100 ms could be gone before the handler ran).
 */
const ROOM_MS = 1_000;

/** What a handler saw of its request's signals, by route. */
interface Seen {
  context: DeadlineContext | undefined;
  signal: AbortSignal;
  error: unknown;
}

/** The end-of-request line for `path`, when it is published (the request's end). */
function nextLine(path: string): Promise<RequestLine> {
  return new Promise((resolve) => {
    const listener = (message: unknown) => {
      if ((message as RequestLine).path !== path) return;
      diagnostics.unsubscribe(REQUEST_END_CHANNEL, listener);
      resolve(message as RequestLine);
    };
    diagnostics.subscribe(REQUEST_END_CHANNEL, listener);
  });
}

/** A handler that waits on `request.signal` for far longer than any budget here, recording what it saw. */
function waitsOnTheSignal(seen: Map<string, Seen>, key: string) {
  return async (request: import('fastify').FastifyRequest) => {
    const entry: Seen = { context: request.deadline?.context, signal: request.signal, error: undefined };
    seen.set(key, entry);
    try {
      await sleep(10_000, undefined, { signal: request.signal });
      return 'late';
    } catch (error) {
      entry.error = error;
      throw error;
    }
  };
}

/** Resolves when the downstream's request is closed: its caller gave up (the request errors with 'aborted' first). */
function closed(request: IncomingMessage): Promise<void> {
  request.on('error', () => {});
  return request.closed ? Promise.resolve() : new Promise((resolve) => request.once('close', () => resolve()));
}

/** No line of fastify's about its own handler timeout, and none at error level. */
function expectNoHandlerTimeoutNoise(logs: LogLine[]): void {
  expect(JSON.stringify(logs)).not.toContain('FST_ERR_HANDLER_TIMEOUT');
  expect(logs.filter((line) => line.level >= 50)).toEqual([]);
}

describe('fastify: handlerTimeout under the plugin', () => {
  const logs: LogLine[] = [];
  const seen = new Map<string, Seen>();
  const app = Fastify({ loggerInstance: pino(memoryDestination(logs)) });
  let url = '';

  beforeAll(async () => {
    await app.register(fastifyDeadline, { serviceName: 'shop', defaultMs: 2_000 });
    app.get('/short', { handlerTimeout: 200 }, waitsOnTheSignal(seen, 'short'));
    app.get('/long', { handlerTimeout: 3_000 }, waitsOnTheSignal(seen, 'long'));
    url = await app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(() => app.close());

  it('a route timeout below the budget: the plugin’s 504 at the timeout; request.signal aborted with the deadline', async () => {
    const line = nextLine('/short');
    const sent = performance.now();
    const res = await request(`${url}/short`);
    const took = performance.now() - sent;
    expect(res.statusCode).toBe(504);
    expect(res.headers['x-deadline-exceeded-by']).toBe('shop');
    expect(await res.body.json()).toMatchObject({ error: 'deadline_exceeded', budgetMs: 200, exceededBy: 'shop' });
    expect(took).toBeGreaterThanOrEqual(190);
    expect(took).toBeLessThan(2_000);
    expect(await line).toMatchObject({ outcome: 'deadline_exceeded', statusCode: 504, budgetMs: 200 });
    const short = seen.get('short') as Seen;
    // The same reason object as the request's context: a DeadlineExceededError of this hop.
    expect(short.signal.reason).toBeInstanceOf(DeadlineExceededError);
    expect(short.signal.reason).toBe(short.context?.stopReason);
    expect(findDeadlineError(short.error)).toBe(short.signal.reason);
    expectNoHandlerTimeoutNoise(logs);
  });

  it('a route timeout above the budget: the budget’s 504', async () => {
    const sent = performance.now();
    const res = await request(`${url}/long`, { headers: { 'x-request-deadline': '150' } });
    const took = performance.now() - sent;
    expect(res.statusCode).toBe(504);
    expect(await res.body.json()).toMatchObject({ budgetMs: 150, exceededBy: 'shop' });
    expect(took).toBeLessThan(2_000);
    expect(isDeadlineExceededError((seen.get('long') as Seen).signal.reason)).toBe(true);
    expectNoHandlerTimeoutNoise(logs);
  });
});

describe('fastify: a server-wide handlerTimeout under the plugin', () => {
  const logs: LogLine[] = [];
  const seen = new Map<string, Seen>();
  const app = Fastify({ loggerInstance: pino(memoryDestination(logs)), handlerTimeout: 250 });
  let url = '';

  beforeAll(async () => {
    app.get('/early', waitsOnTheSignal(seen, 'early'));
    await app.register(fastifyDeadline, { serviceName: 'shop', defaultMs: 2_000, trust: () => true });
    app.get('/late', waitsOnTheSignal(seen, 'late'));
    url = await app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(() => app.close());

  it('bounds every route, one added before the plugin too; a caller’s larger budget is clamped to it', async () => {
    for (const path of ['/early', '/late']) {
      const res = await request(`${url}${path}`, { headers: { 'x-request-deadline': '5000' } });
      expect(res.statusCode, path).toBe(504);
      expect(await res.body.json(), path).toMatchObject({ budgetMs: 250, exceededBy: 'shop' });
    }
    expect(seen.get('early')?.signal.reason).toBeInstanceOf(DeadlineExceededError);
    expectNoHandlerTimeoutNoise(logs);
  });
});

describe('fastify: work given request.signal stops with the request', () => {
  let downstream: Server;
  let downstreamUrl = '';
  const arrived: IncomingMessage[] = [];
  const app: FastifyInstance = Fastify();
  const seen = new Map<string, Seen>();
  let url = '';

  beforeAll(async () => {
    // A downstream that never answers: the call ends only when the caller gives up.
    downstream = createServer((req) => {
      arrived.push(req);
    });
    await new Promise<void>((resolve) => downstream.listen(0, '127.0.0.1', resolve));
    downstreamUrl = `http://127.0.0.1:${(downstream.address() as AddressInfo).port}`;
    await app.register(fastifyDeadline, { serviceName: 'shop' });
    app.get('/call', async (req) => {
      const entry: Seen = { context: req.deadline?.context, signal: req.signal, error: undefined };
      seen.set('call', entry);
      try {
        await request(downstreamUrl, { signal: req.signal });
        return 'answered';
      } catch (error) {
        entry.error = error;
        throw error;
      }
    });
    app.get('/stream', { config: { deadline: false } }, async (req) => {
      const signal = req.signal;
      // The caller's deadline passes: the route's outgoing calls are refused from now on, its stream goes on.
      const context = req.deadline?.context.signal as AbortSignal;
      if (!context.aborted) await once(context, 'abort');
      return { signalAborted: signal.aborted };
    });
    app.get('/quick', async (req) => {
      seen.set('quick', { context: req.deadline?.context, signal: req.signal, error: undefined });
      return 'ok';
    });
    url = await app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    await app.close();
    downstream.closeAllConnections();
    await new Promise((resolve) => downstream.close(resolve));
  });

  it('at the deadline: the downstream call is aborted, with the deadline as its reason', async () => {
    const before = arrived.length;
    const res = await request(`${url}/call`, { headers: { 'x-request-deadline': String(ROOM_MS) } });
    expect(res.statusCode).toBe(504);
    await res.body.dump();
    // The call was made before the deadline (its request arrived), and cut at it.
    expect(arrived.length).toBe(before + 1);
    await closed(arrived[before] as IncomingMessage);
    const entry = seen.get('call') as Seen;
    expect(entry.signal.reason).toBeInstanceOf(DeadlineExceededError);
    expect(findDeadlineError(entry.error)).toBeInstanceOf(DeadlineExceededError);
  });

  it('when the client leaves: the downstream call is aborted, the reason a client-disconnected cancellation', async () => {
    const before = arrived.length;
    const line = nextLine('/call');
    const client = new AbortController();
    const pending = request(`${url}/call`, { signal: client.signal }).catch((error: unknown) => error);
    while (arrived.length === before) await once(downstream, 'request');
    client.abort();
    await pending;
    await closed(arrived[before] as IncomingMessage);
    const reason = (seen.get('call') as Seen).signal.reason;
    expect(reason).toBeInstanceOf(CancelledError);
    expect(reason).toMatchObject({ reason: 'client-disconnected' });
    expect(await line).toMatchObject({ outcome: 'cancelled', statusCode: 499 });
  });

  it('a long-lived route: a caller’s deadline does not abort it (the stream is not cut, only its calls)', async () => {
    const res = await request(`${url}/stream`, { headers: { 'x-request-deadline': '100' } });
    expect(await res.body.json()).toEqual({ signalAborted: false });
  });

  it('never after the response: a request that answered in time keeps its signal unaborted past its deadline', async () => {
    const res = await request(`${url}/quick`, { headers: { 'x-request-deadline': String(ROOM_MS) } });
    expect(await res.body.text()).toBe('ok');
    const quick = seen.get('quick') as Seen;
    // The context itself still stops at the deadline (work left running is bounded by it): wait for that.
    const contextSignal = quick.context?.signal as AbortSignal;
    if (!contextSignal.aborted) await once(contextSignal, 'abort');
    expect(quick.signal.aborted).toBe(false);
  });
});
