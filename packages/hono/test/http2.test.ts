/**
 * Hono on `@hono/node-server` over cleartext HTTP/2 (`createServer` from `node:http2`), under clients no one here
 * wrote: a bare `node:http2` session and curl. Over HTTP/2 a client that goes resets its stream, and Hono's
 * `c.req.raw.signal` says nothing of it; the library takes the reset from Node's request, so the work stops.
 */
import { once } from 'node:events';
import http2, { type ClientHttp2Session } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { CancelledError, currentContext, DeadlineExceededError, type StopReason } from '@deadline/core';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CURL, curl, requireForeignClients } from '../../../test/support/foreign-clients.ts';
import { rawSession } from '../../../test/support/raw-http2.ts';
import { type DeadlineEnv, deadline } from '../src/index.ts';

const available = await requireForeignClients(CURL);

interface Deferred<T> {
  promise: Promise<T>;
  resolve: (value: T) => void;
}

/** `Promise.withResolvers()`, which Node 20 lacks. */
function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** Why each waiting route's context stopped, and that it runs, by route. */
const stopped = new Map<string, Deferred<StopReason>>();
const running = new Map<string, Deferred<void>>();

function waiting(key: string) {
  stopped.set(key, deferred<StopReason>());
  running.set(key, deferred<void>());
}

/** One GET on `session`: the status, the headers, the body; or the stream closed by the test first. */
function get(session: ClientHttp2Session, path: string, headers: Record<string, string>) {
  const stream = session.request({ ':method': 'GET', ':path': path, ...headers });
  const answer = (async () => {
    const [response] = (await once(stream, 'response')) as [http2.IncomingHttpHeaders];
    let body = '';
    stream.setEncoding('utf8');
    for await (const chunk of stream) body += chunk;
    return { status: response[':status'], headers: response, body };
  })();
  return { stream, answer };
}

describe.runIf(available)('hono over HTTP/2 (h2c)', () => {
  let server: http2.Http2Server;
  let origin: string;
  let session: ClientHttp2Session;

  beforeAll(async () => {
    const app = new Hono<DeadlineEnv>();
    app.use(deadline({ serviceName: 'catalog', defaultMs: 2_000, logLevel: false }));
    app.get('/context', (c) =>
      c.json({ inContext: currentContext() === c.var.deadline?.context, budgetMs: c.var.deadline?.budget.budgetMs }),
    );
    app.all('/wait/:key', async (c) => {
      const key = c.req.param('key');
      const context = currentContext();
      context?.onStop((reason) => stopped.get(key)?.resolve(reason));
      running.get(key)?.resolve();
      await new Promise((resolve) => context?.onStop(resolve));
      return c.json({ late: true });
    });
    server = await new Promise<http2.Http2Server>((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1', createServer: http2.createServer }, () =>
        resolve(s as http2.Http2Server),
      );
    });
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    session = rawSession(origin);
  });
  afterAll(async () => {
    session?.close();
    await new Promise((resolve) => server?.close(resolve));
  });

  it('a raw HTTP/2 request: its x-request-deadline is the budget, its handler in the context', async () => {
    const { answer } = get(session, '/context', { 'x-request-deadline': '800' });
    const { status, body } = await answer;
    expect(status).toBe(200);
    expect(JSON.parse(body)).toEqual({ inContext: true, budgetMs: 800 });
  });

  it('the deadline passes: 504 JSON naming this hop, the handler’s context stopped by it', async () => {
    waiting('expire');
    const { answer } = get(session, '/wait/expire', { 'x-request-deadline': '150' });
    const { status, headers, body } = await answer;
    expect(status).toBe(504);
    expect(headers['x-deadline-exceeded-by']).toBe('catalog');
    expect(JSON.parse(body)).toMatchObject({ error: 'deadline_exceeded', budgetMs: 150 });
    expect(await stopped.get('expire')?.promise).toBeInstanceOf(DeadlineExceededError);
  });

  it('the client resets its stream: the work is cancelled as a client that left (Hono’s own signal never says)', async () => {
    waiting('reset');
    const { stream, answer } = get(session, '/wait/reset', { 'x-request-deadline': '4000' });
    answer.catch(() => {});
    await running.get('reset')?.promise;
    stream.close(http2.constants.NGHTTP2_CANCEL);
    const reason = await stopped.get('reset')?.promise;
    expect(reason).toBeInstanceOf(CancelledError);
    expect((reason as CancelledError).reason).toBe('client-disconnected');
  });

  it('curl over HTTP/2 (prior knowledge): the deadline answered 504 naming this hop', async () => {
    waiting('curl');
    const answer = await curl(`${origin}/wait/curl`, { 'x-request-deadline': '150' }, new Uint8Array(0));
    expect(answer.status).toBe(504);
    expect(answer.headers['x-deadline-exceeded-by']).toBe('catalog');
    expect(JSON.parse(answer.body.toString('utf8'))).toMatchObject({ error: 'deadline_exceeded' });
  });
});
