/**
 * The hand-written complete minima are floors only if they do what they claim: a 504 at the deadline from the
 * caller's budget, `deadline` on the request, the handler in the request's context, the client's leaving heard,
 * (express) the request's body events in the context, and (Koa) a deadline error escaping the routes answered 504
 * before the app's own error handling. Checked on real servers over loopback.
 */
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import Koa from 'koa';
import { afterEach, describe, expect, it } from 'vitest';
import { addCompleteDeadlineMinimum } from '../src/minimum/deadline-minimum-complete.ts';
import { completeDeadlineMinimum } from '../src/minimum/express-minimum-complete.ts';
import { completeHonoDeadlineMinimum } from '../src/minimum/hono-minimum-complete.ts';
import { completeKoaDeadlineMinimum } from '../src/minimum/koa-minimum-complete.ts';
import type { RequestScope } from '../src/minimum/minimum-deadlines.ts';

interface Answer {
  status: number;
  body: string;
}

/** One request to `port`, with `body` if given (a POST). */
function call(port: number, headers: Record<string, string>, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ port, host: '127.0.0.1', method: body === undefined ? 'GET' : 'POST', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        text += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** A request the client abandons once the server has it (the handler reports `received`). */
function abandon(port: number, received: Promise<unknown>): Promise<void> {
  const req = request({ port, host: '127.0.0.1', headers: { 'x-request-deadline': '60000' } });
  req.on('error', () => {});
  req.end();
  return received.then(() => {
    req.destroy();
  });
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** Resolves with the scope's outcome once it has one. */
function outcomeOf(scope: RequestScope<unknown>): Promise<string | undefined> {
  return new Promise((resolve) => {
    const check = () => (scope.outcome === undefined ? setImmediate(check) : resolve(scope.outcome));
    check();
  });
}

describe('the fastify complete minimum', () => {
  async function server() {
    const app = Fastify();
    addCompleteDeadlineMinimum(app);
    let arrived: (scope: RequestScope<unknown>) => void = () => {};
    const arrival = new Promise<RequestScope<unknown>>((resolve) => {
      arrived = resolve;
    });
    app.get('/', async (request) => {
      const scope = (request as unknown as { deadline: RequestScope<unknown> }).deadline;
      arrived(scope);
      // Waits past any budget: only the minimum's 504 (or the client leaving) ends it.
      await new Promise((resolve) => setTimeout(resolve, 5_000).unref());
      return { late: true };
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => app.close());
    return { port: (app.server.address() as AddressInfo).port, arrival };
  }

  it('answers 504 at the caller’s budget and sets request.deadline', async () => {
    const { port, arrival } = await server();
    const answer = await call(port, { 'x-request-deadline': '100' });
    expect(answer.status).toBe(504);
    const scope = await arrival;
    expect(scope.budgetMs).toBe(100);
    expect(await outcomeOf(scope)).toBe('deadline_exceeded');
  });

  it('takes the smallest budget among the headers it knows', async () => {
    const { port, arrival } = await server();
    const answer = await call(port, { 'x-request-deadline': '5000', 'grpc-timeout': '80m' });
    expect(answer.status).toBe(504);
    expect((await arrival).budgetMs).toBe(80);
  });

  it('hears the client leave', async () => {
    const { port, arrival } = await server();
    await abandon(port, arrival);
    expect(await outcomeOf(await arrival)).toBe('cancelled');
  });
});

describe('the express complete minimum', () => {
  async function server() {
    const app = express();
    const middleware = completeDeadlineMinimum();
    app.use(middleware);
    let arrived: (scope: RequestScope<unknown>) => void = () => {};
    const arrival = new Promise<RequestScope<unknown>>((resolve) => {
      arrived = resolve;
    });
    // Reads the body itself: its 'end' listener runs where the minimum's emit wrapper puts it.
    app.post('/', (req, res) => {
      const scope = (req as unknown as { deadline: RequestScope<unknown> }).deadline;
      let body = '';
      req.on('data', (chunk) => {
        body += chunk;
      });
      req.on('end', () => {
        res.json({ body, inContext: middleware.als.getStore() === scope });
      });
    });
    app.get('/', (req) => {
      arrived((req as unknown as { deadline: RequestScope<unknown> }).deadline);
    });
    const listening = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => listening.once('listening', resolve));
    closers.push(() => new Promise((resolve) => listening.close(() => resolve())));
    return { port: (listening.address() as AddressInfo).port, arrival };
  }

  it('answers 504 at the caller’s budget', async () => {
    const { port } = await server();
    const answer = await call(port, { 'x-request-deadline': '100' });
    expect(answer.status).toBe(504);
  });

  it('runs the body’s events in the request’s context', async () => {
    const { port } = await server();
    const answer = await call(port, { 'x-request-deadline': '5000', 'content-type': 'text/plain' }, 'hello');
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toEqual({ body: 'hello', inContext: true });
  });

  it('hears the client leave', async () => {
    const { port, arrival } = await server();
    await abandon(port, arrival);
    expect(await outcomeOf(await arrival)).toBe('cancelled');
  });
});

describe('the Koa complete minimum', () => {
  async function server() {
    const app = new Koa();
    const caught: unknown[] = [];
    app.on('error', (error: unknown) => caught.push(error));
    const middleware = completeKoaDeadlineMinimum();
    app.use(middleware);
    let arrived: (scope: RequestScope<unknown>) => void = () => {};
    const arrival = new Promise<RequestScope<unknown>>((resolve) => {
      arrived = resolve;
    });
    app.use(async (ctx) => {
      const scope = (ctx as unknown as { deadline: RequestScope<unknown> }).deadline;
      if (ctx.path === '/throws')
        throw Object.assign(new Error('a downstream ran out'), { code: 'ERR_DEADLINE_EXCEEDED' });
      if (ctx.path === '/context') {
        await new Promise((resolve) => setTimeout(resolve, 5));
        ctx.body = { inContext: middleware.als.getStore() === scope };
        return;
      }
      arrived(scope);
      // Waits past any budget: only the minimum's 504 (or the client leaving) ends it.
      await new Promise((resolve) => setTimeout(resolve, 5_000).unref());
    });
    const listening = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => listening.once('listening', resolve));
    closers.push(() => new Promise((resolve) => listening.close(() => resolve())));
    return { port: (listening.address() as AddressInfo).port, arrival, caught };
  }

  it('answers 504 at the caller’s budget', async () => {
    const { port, arrival } = await server();
    const answer = await call(port, { 'x-request-deadline': '100' });
    expect(answer.status).toBe(504);
    expect(await outcomeOf(await arrival)).toBe('deadline_exceeded');
  });

  it('runs the routes in the request’s context, and answers a deadline error escaping them with 504', async () => {
    const { port, caught } = await server();
    const inContext = await new Promise<Answer>((resolve, reject) => {
      const req = request({ port, host: '127.0.0.1', path: '/context' }, (res) => {
        let text = '';
        res.on('data', (chunk) => {
          text += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      });
      req.on('error', reject);
      req.end();
    });
    expect(JSON.parse(inContext.body)).toEqual({ inContext: true });
    const thrown = await new Promise<number>((resolve, reject) => {
      const req = request({ port, host: '127.0.0.1', path: '/throws' }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    expect(thrown).toBe(504);
    expect(caught).toEqual([]);
  });

  it('hears the client leave', async () => {
    const { port, arrival } = await server();
    await abandon(port, arrival);
    expect(await outcomeOf(await arrival)).toBe('cancelled');
  });
});

describe('the Hono complete minimum', () => {
  async function server() {
    const middleware = completeHonoDeadlineMinimum();
    const app = new Hono();
    app.use(middleware as never);
    let arrived: (scope: RequestScope<unknown>) => void = () => {};
    const arrival = new Promise<RequestScope<unknown>>((resolve) => {
      arrived = resolve;
    });
    app.get('/', async (c) => {
      const scope = c.get('deadline' as never) as RequestScope<unknown>;
      arrived(scope);
      await new Promise((resolve) => setTimeout(resolve, 5));
      if (c.req.header('x-wait') === undefined) return c.json({ inContext: middleware.als.getStore() === scope });
      // Waits past any budget: only the minimum's 504 (or the client leaving) ends it.
      await new Promise((resolve) => setTimeout(resolve, 5_000).unref());
      return c.json({ late: true });
    });
    const listening = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise((resolve) => listening.once('listening', resolve));
    closers.push(() => new Promise((resolve) => listening.close(() => resolve())));
    return { port: (listening.address() as AddressInfo).port, arrival };
  }

  it('answers 504 at the caller’s budget, and runs the routes in the request’s context', async () => {
    const { port, arrival } = await server();
    const answer = await call(port, { 'x-request-deadline': '100', 'x-wait': '1' });
    expect(answer.status).toBe(504);
    expect(await outcomeOf(await arrival)).toBe('deadline_exceeded');
    const { port: other } = await server();
    expect(JSON.parse((await call(other, { 'x-request-deadline': '5000' })).body)).toEqual({ inContext: true });
  });

  it('hears the client leave', async () => {
    const { port, arrival } = await server();
    const req = request({ port, host: '127.0.0.1', headers: { 'x-request-deadline': '60000', 'x-wait': '1' } });
    req.on('error', () => {});
    req.end();
    const scope = await arrival;
    req.destroy();
    expect(await outcomeOf(scope)).toBe('cancelled');
  });
});
