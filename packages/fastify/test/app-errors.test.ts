/**
 * What an app's own error handling sees under the plugin. A catch-all `setErrorHandler` (log at error level, answer
 * 500) never gets an error that means the request ran out of time or was cancelled: the plugin answers those (504
 * naming the hop, or 499); every other error reaches it as before, and `onError` hooks see them all. A client that
 * leaves mid-request leaves fastify's hooks and request log as they are without the plugin, plus the plugin's line.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { CancelledError, currentSignal, DeadlineExceededError, timeoutFor } from '@deadline/core';
import Fastify from 'fastify';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LogLine, memoryDestination } from '../../server/test/harness.ts';
import fastifyDeadline from '../src/index.ts';

/** pino's level number for error. */
const ERROR = 50;

describe('fastify: an app’s catch-all error handler', () => {
  const logs: LogLine[] = [];
  const caught: unknown[] = [];
  const onErrorSaw: unknown[] = [];
  const app = Fastify({ loggerInstance: pino(memoryDestination(logs)) });
  let url = '';

  beforeAll(async () => {
    await app.register(fastifyDeadline, { serviceName: 'orders' });
    app.setErrorHandler((error, request, reply) => {
      caught.push(error);
      request.log.error({ err: error }, 'unexpected error');
      reply.code(500).send({ error: 'internal' });
    });
    app.addHook('onError', async (_request, _reply, error) => {
      onErrorSaw.push(error);
    });
    const downstream = () =>
      new DeadlineExceededError({ phase: 'during-call', whose: 'downstream:inventory', budgetMs: 80 });
    app.get('/downstream', async () => {
      throw downstream();
    });
    // This hop's own deadline, before it passed: a call needing more than what is left is not made.
    app.get('/no-time-for-the-call', async () => {
      timeoutFor('orders-db', { marginMs: 60_000 });
      return 'called';
    });
    app.get('/wrapped', async () => {
      throw new TypeError('fetch failed', { cause: downstream() });
    });
    app.get('/cancelled', async () => {
      throw new CancelledError('stopped on purpose');
    });
    app.get('/bug', async () => {
      throw new Error('a bug');
    });
    app.get('/not-an-error', async () => {
      throw 'a string';
    });
    app.get(
      '/own-handler',
      {
        errorHandler: (error, _request, reply) => {
          reply.code(503).send({ own: (error as Error).message });
        },
      },
      async () => {
        throw downstream();
      },
    );
    url = await app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(() => app.close());

  it('a downstream’s deadline: the plugin’s 504 naming it, the catch-all not reached, onError told', async () => {
    const before = onErrorSaw.length;
    const res = await request(`${url}/downstream`);
    expect(res.statusCode).toBe(504);
    expect(res.headers['x-deadline-exceeded-by']).toBe('inventory');
    expect(await res.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'inventory' });
    expect(onErrorSaw.slice(before)).toEqual([expect.any(DeadlineExceededError)]);
    expect(caught).toEqual([]);
  });

  it('this hop’s deadline, a call refused before it passed: 504 naming this hop', async () => {
    const res = await request(`${url}/no-time-for-the-call`);
    expect(res.statusCode).toBe(504);
    expect(res.headers['x-deadline-exceeded-by']).toBe('orders');
    expect(await res.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'orders' });
    expect(caught).toEqual([]);
  });

  it('a deadline error wrapped by someone else (fetch failed) and a cancellation are answered too', async () => {
    const wrapped = await request(`${url}/wrapped`);
    expect(wrapped.statusCode).toBe(504);
    expect(wrapped.headers['x-deadline-exceeded-by']).toBe('inventory');
    await wrapped.body.dump();
    const cancelled = await request(`${url}/cancelled`);
    expect(cancelled.statusCode).toBe(499);
    await cancelled.body.dump();
    expect(caught).toEqual([]);
    expect(logs.filter((line) => line.level >= ERROR)).toEqual([]);
  });

  it('every other error reaches the catch-all as it was thrown, an Error or not', async () => {
    const bug = await request(`${url}/bug`);
    expect(bug.statusCode).toBe(500);
    expect(await bug.body.json()).toEqual({ error: 'internal' });
    const thrown = await request(`${url}/not-an-error`);
    expect(thrown.statusCode).toBe(500);
    await thrown.body.dump();
    expect(caught).toEqual([expect.objectContaining({ message: 'a bug' }), 'a string']);
    caught.length = 0;
  });

  it('a route with an error handler of its own gets its deadline errors, as before', async () => {
    const res = await request(`${url}/own-handler`);
    expect(res.statusCode).toBe(503);
    expect(await res.body.json()).toEqual({ own: expect.stringContaining('inventory') });
  });
});

describe('fastify: a client that leaves mid-request', () => {
  /** What fastify did for a request whose client left: its hooks called, its own log lines, its error handler. */
  async function whatFastifyDid(withPlugin: boolean) {
    const logs: LogLine[] = [];
    const seen: string[] = [];
    const app = Fastify({ loggerInstance: pino(memoryDestination(logs)) });
    if (withPlugin) await app.register(fastifyDeadline, { serviceName: 'orders' });
    app.addHook('onResponse', async () => {
      seen.push('onResponse');
    });
    app.addHook('onError', async () => {
      seen.push('onError');
    });
    let clientGone!: () => void;
    const gone = new Promise<void>((resolve) => {
      clientGone = resolve;
    });
    app.addHook('onRequestAbort', async (_request) => {
      seen.push('onRequestAbort');
      clientGone();
    });
    app.setErrorHandler((error, request, reply) => {
      seen.push('errorHandler');
      request.log.error({ err: error }, 'unexpected error');
      reply.code(500).send();
    });
    let started!: () => void;
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    let ended!: () => void;
    const handlerEnded = new Promise<void>((resolve) => {
      ended = resolve;
    });
    app.get('/', async () => {
      started();
      try {
        // Stopped by the plugin when the client leaves; without it, runs on until fastify has seen the client leave
        // (whatever a loaded machine's timers do meanwhile), then answers to nobody.
        const signal = currentSignal();
        await (signal === undefined ? gone : sleep(60_000, undefined, { signal }));
        return { late: true };
      } finally {
        ended();
      }
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const client = new AbortController();
      const response = request(url, { signal: client.signal }).catch((error: unknown) => error);
      await running;
      client.abort();
      await response;
      await handlerEnded;
      // fastify handles the handler's result a few turns of the loop after it settles.
      for (let turn = 0; turn < 5; turn++) await new Promise((resolve) => setImmediate(resolve));
    } finally {
      await app.close();
    }
    const own = logs
      .filter((line) => !String(line.msg).startsWith('deadline:') && !String(line.msg).startsWith('Server listening'))
      .map((line) => `${line.level} ${line.msg}`);
    return { seen, own, ours: logs.filter((line) => String(line.msg).startsWith('deadline:')) };
  }

  it('fastify’s hooks and request log behave as without the plugin; the plugin adds its one line', async () => {
    const without = await whatFastifyDid(false);
    const withPlugin = await whatFastifyDid(true);
    expect(without.seen).toEqual(['onRequestAbort']);
    expect(withPlugin.seen).toEqual(without.seen);
    expect(withPlugin.own).toEqual(without.own);
    expect(withPlugin.ours).toEqual([expect.objectContaining({ msg: 'deadline: cancelled', statusCode: 499 })]);
  });
});
