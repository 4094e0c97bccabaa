import { Readable } from 'node:stream';
import { finished } from 'node:stream/promises';
import v8 from 'node:v8';
import vm from 'node:vm';
import { createContext, currentContext, InvalidArgumentError } from '@deadline/core';
import { deadlineMixin } from '@deadline/pino';
import Fastify, { type FastifyRequest } from 'fastify';
import Fastify57 from 'fastify57';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admissionSuite } from '../../server/test/admission.ts';
import { conformanceSuite } from '../../server/test/conformance.ts';
import { type Harness, type LogLine, memoryDestination } from '../../server/test/harness.ts';
import { longLivedSuite } from '../../server/test/long-lived.ts';
import fastifyDeadline, { fastifyDeadline as named } from '../src/index.ts';

/** The conformance harness on a fastify of this version (5.7 has neither `request.signal` nor `handlerTimeout`). */
const harnessOn = (name: string, fastify: typeof Fastify): Harness => ({
  name,
  ownErrorBody: true,
  async start(options, routes) {
    const logs: LogLine[] = [];
    const app = fastify({ loggerInstance: pino({ level: 'debug' }, memoryDestination(logs)) });
    // Hands the request stream to the handler as the body, so it reads it itself.
    app.addContentTypeParser('application/octet-stream', (_request, payload, done) => done(null, payload));
    await app.register(fastifyDeadline, options as never);
    for (const route of routes) {
      app.route({
        method: route.method,
        url: route.path,
        ...(route.longLived ? { config: { deadline: false } } : {}),
        handler: async (req, reply) => {
          await route.handler({
            deadline: req.deadline as NonNullable<typeof req.deadline>,
            body: route.method === 'POST' ? (req.body as Readable) : undefined,
            reply(status, body, headers) {
              reply
                .code(status)
                .headers(headers ?? {})
                .send(body);
            },
            async stream(status, chunks) {
              reply.code(status).type('text/plain').send(Readable.from(chunks));
              await finished(reply.raw);
            },
            async events(chunks) {
              reply.code(200).type('text/event-stream').send(Readable.from(chunks));
              await finished(reply.raw);
            },
          });
        },
      });
    }
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    return { url, logs, close: () => app.close() };
  },
});

conformanceSuite(harnessOn('fastify 5.12', Fastify));
longLivedSuite(harnessOn('fastify 5.12', Fastify));
admissionSuite(harnessOn('fastify 5.12', Fastify));
conformanceSuite(harnessOn('fastify 5.7', Fastify57 as unknown as typeof Fastify));

describe('fastify plugin', () => {
  it('is a fastify-plugin, default and named export', () => {
    expect(named).toBe(fastifyDeadline);
    expect((fastifyDeadline as unknown as Record<symbol, unknown>)[Symbol.for('skip-override')]).toBe(true);
  });

  it('checks its options at registration, naming the option', async () => {
    const app = Fastify();
    app.register(fastifyDeadline, { defaultMs: 0 });
    await expect(app.ready()).rejects.toThrow(InvalidArgumentError);
    const other = Fastify();
    other.register(fastifyDeadline, { serviceName: 'a b' });
    await expect(other.ready()).rejects.toThrow(/serviceName must be/);
  });

  it('writes its end line to the logger option when one is given, instead of request.log', async () => {
    const own: LogLine[] = [];
    const requests: LogLine[] = [];
    const app = Fastify({ loggerInstance: pino(memoryDestination(requests)) });
    await app.register(fastifyDeadline, { serviceName: 'orders', logger: pino(memoryDestination(own)) });
    app.get('/', async () => 'ok');
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      await (await request(url)).body.dump();
      await expect.poll(() => own.some((line) => line.msg === 'deadline: ok')).toBe(true);
      expect(requests.some((line) => String(line.msg).startsWith('deadline:'))).toBe(false);
      const bad = Fastify();
      bad.register(fastifyDeadline, { logger: 'console' as never });
      await expect(bad.ready()).rejects.toThrow(/logger must be/);
    } finally {
      await app.close();
    }
  });

  it('checks a route’s config.deadline when the route is added', async () => {
    const app = Fastify();
    await app.register(fastifyDeadline, { maxMs: 1_000 });
    expect(() => app.get('/bad', { config: { deadline: { defaultMs: 5_000 } } }, async () => 'x')).toThrow(
      /route GET \/bad: config.deadline.defaultMs must be at most maxMs \(1000\); received 5000/,
    );
  });

  it('handlers run in the request’s context: after a JSON body is parsed, after a hook of the app’s called back from elsewhere; a context a hook made inside it is kept', async () => {
    const app = Fastify();
    await app.register(fastifyDeadline, { serviceName: 'svc' });
    // A hook that hands `next` to a queue drained by a timer made outside any request: the rest of the chain runs
    // in that timer's context, as after a callback API's reply (an event emitter, a pooled socket).
    const waiting: (() => void)[] = [];
    const drain = setInterval(() => {
      for (const next of waiting.splice(0)) next();
    }, 1);
    app.addHook('onRequest', (request, _reply, next) => {
      if (request.headers['x-call-back-from-elsewhere'] === '1') waiting.push(next);
      // A context of the app's own, made inside the request's: the handler keeps it.
      else if (request.headers['x-child'] === '1') createContext({ baggage: { made: 'by a hook' } }).run(next);
      else next();
    });
    const seen: string[] = [];
    app.addHook('preHandler', (request, _reply, next) => {
      seen.push(`preHandler ${currentContext() === request.deadline?.context}`);
      next();
    });
    const same = (request: FastifyRequest) => ({
      same: currentContext() === request.deadline?.context,
      ...(request.headers['x-child'] === '1' ? { child: currentContext()?.baggage.made } : {}),
    });
    app.get('/', async (request) => same(request));
    app.post('/', async (request) => ({ ...same(request), body: request.body }));
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const get = await request(url);
      expect(await get.body.json()).toEqual({ same: true });
      const head = await request(url, { method: 'HEAD' });
      await head.body.dump();
      expect(head.statusCode).toBe(200);
      const post = await request(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ a: 1 }),
      });
      expect(await post.body.json()).toEqual({ same: true, body: { a: 1 } });
      expect(seen).toEqual(['preHandler true', 'preHandler true', 'preHandler true']);
      // Left by a hook: the rest of the chain is back in the context (preValidation enters it again).
      const elsewhere = await request(url, { headers: { 'x-call-back-from-elsewhere': '1' } });
      expect(await elsewhere.body.json()).toEqual({ same: true });
      expect(seen.at(-1)).toBe('preHandler true');
      const child = await request(url, { headers: { 'x-child': '1' } });
      expect(await child.body.json()).toEqual({ same: false, child: 'by a hook' });
    } finally {
      clearInterval(drain);
      await app.close();
    }
  });

  it('answers 504 at the deadline while fastify is still parsing a slowly uploaded JSON body', async () => {
    const app = Fastify();
    await app.register(fastifyDeadline, { serviceName: 'gateway' });
    let handled = 0;
    app.post('/orders', async () => {
      handled++;
      return { ok: true };
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      async function* slowJson() {
        yield '{"items":[';
        for (let i = 0; i < 30; i++) {
          await new Promise((resolve) => setTimeout(resolve, 100));
          yield `${i},`;
        }
        yield '0]}';
      }
      const startedAt = performance.now();
      const res = await request(`${url}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-deadline': '200' },
        body: Readable.from(slowJson()),
      }).catch((error: unknown) => error);
      const took = performance.now() - startedAt;
      if (!(res instanceof Error)) {
        expect((res as { statusCode: number }).statusCode).toBe(504);
        await (res as { body: { dump(): Promise<void> } }).body.dump();
      }
      expect(took).toBeGreaterThanOrEqual(190);
      expect(took).toBeLessThan(2_500); // the upload takes 3 s
    } finally {
      await app.close();
    }
    expect(handled).toBeLessThanOrEqual(1); // if the body still arrives, the handler's answer is dropped
  });

  it('a deadline kept after its response does not keep the request: the reply is let go of, and a call that outlives the request is still logged on its logger', async () => {
    // A full collection on demand: what is still reachable after it is kept by something.
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const logs: LogLine[] = [];
    const app = Fastify({ loggerInstance: pino(memoryDestination(logs)) });
    await app.register(fastifyDeadline);
    // What the route saw: its deadline, kept here after the response, and its reply, held only weakly.
    const seen: { deadline: FastifyRequest['deadline']; reply: WeakRef<object> | undefined } = {
      deadline: null,
      reply: undefined,
    };
    app.get('/', async (req, res) => {
      seen.deadline = req.deadline;
      seen.reply = new WeakRef(res);
      return 'ok';
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const res = await request(url, { headers: { connection: 'close' } });
      await res.body.text();
      const kept = seen.deadline;
      const reply = seen.reply;
      expect(kept?.outcome).toBe('ok');
      // fastify lets go of its reply within a few turns of the loop; the deadline held here must not keep it.
      for (let turn = 0; turn < 100 && reply?.deref() !== undefined; turn++) {
        await new Promise((resolve) => setImmediate(resolve));
        gc();
      }
      expect(reply?.deref()).toBeUndefined();
      // The logger was looked up before the reply went: a call ending after the response still finds it.
      (kept as unknown as { callOutlived(message: object): void }).callOutlived({
        target: 'audit-db',
        outlivedMs: 120,
        elapsedMs: 130,
        outcome: 'ok',
      });
      expect(logs.some((line) => String(line.msg).includes('a call to audit-db outlived its request'))).toBe(true);
    } finally {
      await app.close();
    }
  });

  describe('per-route limits and logging', () => {
    const logs: LogLine[] = [];
    const app = Fastify({
      loggerInstance: pino({ level: 'info', mixin: deadlineMixin() }, memoryDestination(logs)),
    });
    let url = '';
    beforeAll(async () => {
      await app.register(fastifyDeadline, {
        serviceName: 'gateway',
        defaultMs: 2_000,
        maxMs: 4_000,
        trust: (request) => request.headers['x-internal'] === '1',
      });
      app.get('/report', { config: { deadline: { defaultMs: 300, maxMs: 500 } } }, async (req) => {
        req.log.info('building the report');
        return { budgetMs: req.deadline?.budget.budgetMs };
      });
      app.get('/plain', async (req) => ({ budgetMs: req.deadline?.budget.budgetMs }));
      url = await app.listen({ port: 0, host: '127.0.0.1' });
    });
    afterAll(() => app.close());

    it('uses the route’s SLA for its default and its maximum', async () => {
      const report = await request(`${url}/report`);
      expect(await report.body.json()).toEqual({ budgetMs: 300 });
      const internal = { 'x-request-deadline': '3000', 'x-internal': '1' };
      const clamped = await request(`${url}/report`, { headers: internal });
      expect(await clamped.body.json()).toEqual({ budgetMs: 500 });
      const plain = await request(`${url}/plain`, { headers: internal });
      expect(await plain.body.json()).toEqual({ budgetMs: 3_000 });
      // A caller the service does not trust may only shorten the route's default.
      const outside = await request(`${url}/plain`, { headers: { 'x-request-deadline': '3000' } });
      expect(await outside.body.json()).toEqual({ budgetMs: 2_000 });
      const shorter = await request(`${url}/report`, { headers: { 'x-request-deadline': '120' } });
      expect(await shorter.body.json()).toEqual({ budgetMs: 120 });
    });

    it('request.log lines inside the handler carry the trace id, hop, budget and time left', async () => {
      const res = await request(`${url}/report`, {
        headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
      });
      await res.body.dump();
      const line = logs.findLast((l) => l.msg === 'building the report');
      expect(line).toMatchObject({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', hop: 'gateway', budgetMs: 300 });
      expect(line?.remainingMs as number).toBeLessThanOrEqual(300);
      expect(line?.reqId).toBeDefined(); // fastify's own bindings are kept
      const end = logs.findLast((l) => l.msg === 'deadline: ok' && l.path === '/report');
      expect(end).toMatchObject({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', outcome: 'ok', budgetMs: 300 });
    });
  });
});
