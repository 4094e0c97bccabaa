import { createServer, type ServerResponse } from 'node:http';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { CancelledError } from '@deadline/core';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { type DeadlineHandlerOptions, type DeadlineRequest, deadlineHandler } from '../src/index.ts';
import { admissionSuite, openConnections, sendOn } from './admission.ts';
import { conformanceSuite } from './conformance.ts';
import { type Harness, type LogLine, memoryDestination } from './harness.ts';
import { longLivedSuite } from './long-lived.ts';

const nodeHarness: Harness = {
  name: 'node:http (deadlineHandler)',
  ownErrorBody: true,
  async start(options, routes) {
    const logs: LogLine[] = [];
    const logger = pino({ level: 'debug' }, memoryDestination(logs));
    const handler = deadlineHandler(
      async (req: DeadlineRequest, res: ServerResponse) => {
        const route = routes.find((r) => r.method === req.method && r.path === req.url?.split('?')[0]);
        if (route === undefined) {
          res.writeHead(404).end();
          return;
        }
        await route.handler({
          deadline: req.deadline,
          body: req.method === 'POST' ? req : undefined,
          reply(status, body, headers) {
            res.writeHead(status, { 'content-type': 'application/json', ...headers });
            res.end(JSON.stringify(body));
          },
          async stream(status, chunks) {
            res.writeHead(status, { 'content-type': 'text/plain' });
            await pipeline(Readable.from(chunks), res);
          },
          async events(chunks) {
            res.writeHead(200, { 'content-type': 'text/event-stream' });
            await pipeline(Readable.from(chunks), res);
          },
        });
      },
      {
        ...(options as DeadlineHandlerOptions),
        logger,
        longLived: (req) => routes.some((r) => r.longLived === true && r.path === req.url?.split('?')[0]),
      },
    );
    const server = createServer(handler);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      logs,
      close: () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  },
};

conformanceSuite(nodeHarness);
longLivedSuite(nodeHarness);
admissionSuite(nodeHarness);

describe('deadlineHandler options', () => {
  it('are checked at creation, naming the option and the value', () => {
    const noop = () => {};
    expect(() => deadlineHandler(noop, { defaultMs: -1 })).toThrow(/defaultMs must be a finite number between 1/);
    expect(() => deadlineHandler(noop, { defaultMs: 9_000, maxMs: 5_000 })).toThrow(
      /defaultMs must be at most maxMs \(5000\); received 9000/,
    );
    expect(() => deadlineHandler(noop, { serviceName: 'has space' })).toThrow(
      /serviceName must be 1 to 128 visible ASCII/,
    );
    expect(() => deadlineHandler(noop, { headers: ['http2' as 'grpc'] })).toThrow(/headers must be an array of/);
    expect(() => deadlineHandler(noop, { trust: 'yes' as never })).toThrow(/trust must be a function/);
    expect(() => deadlineHandler(noop, { onExpire: 1 as never })).toThrow(/onExpire must be a function/);
    expect(() => deadlineHandler(noop, { logLevel: 'loud' as never })).toThrow(/logLevel must be/);
    expect(() => deadlineHandler(noop, { admission: 5 as never })).toThrow(
      /admission must be true, false or an object/,
    );
    expect(() => deadlineHandler(noop, { admission: { quantile: 1 } })).toThrow(/admission.quantile must be/);
    expect(() => deadlineHandler(noop, { admission: { exempt: 'health' as never } })).toThrow(
      /admission.exempt must be a function/,
    );
    expect(() => deadlineHandler(noop, { absolute: { skewMs: -1 } })).toThrow(/absolute.skewMs/);
    expect(() => deadlineHandler(noop, { minMs: 100, defaultMs: 50 })).toThrow(/minMs must be at most defaultMs/);
    expect(() => deadlineHandler(noop, { answer: {} as never })).toThrow(/answer must be a function/);
    // A route that only lowers maxMs lowers the default with it.
    expect(() => deadlineHandler(noop, { maxMs: 100 })).not.toThrow();
  });
});

describe('deadlineHandler errors', () => {
  it('answers 500 for other failures and logs them; a later request is served normally', async () => {
    const logs: LogLine[] = [];
    const server = createServer(
      deadlineHandler(
        async (req) => {
          if (req.url === '/boom') throw new Error('boom');
          if (req.url === '/sync') throw new TypeError('sync boom');
          return undefined;
        },
        { serviceName: 'orders', logger: pino(memoryDestination(logs)) },
      ),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      for (const path of ['/boom', '/sync']) {
        const res = await fetch(`${url}${path}`);
        expect(res.status).toBe(500);
        expect(await res.text()).toBe('Internal Server Error');
      }
      expect(logs.filter((l) => l.msg === 'deadline: the handler failed')).toHaveLength(2);
      expect(logs.filter((l) => l.msg === 'deadline: error')).toHaveLength(2);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('deadlineHandler `answer`: the shape of its deadline answer', () => {
  it("answers the deadline and a refusal in the option's shape; a throwing shape falls back to the JSON 504, logged", async () => {
    const logs: LogLine[] = [];
    let throwing = false;
    const server = createServer(
      deadlineHandler(
        async (req, res) => {
          await new Promise((resolve) => req.deadline.context.onStop(resolve));
          res.end('late');
        },
        {
          serviceName: 'orders',
          defaultMs: 100,
          logger: pino(memoryDestination(logs)),
          answer(error, { hop, budgetMs }) {
            if (throwing) throw new Error('shape broke');
            return {
              statusCode: 504,
              headers: { 'content-type': 'application/problem+json', 'x-deadline-exceeded-by': error.hop ?? hop },
              body: JSON.stringify({ title: 'Gateway Timeout', budgetMs }),
            };
          },
        },
      ),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const expired = await fetch(`${url}/slow`);
      expect(expired.status).toBe(504);
      expect(expired.headers.get('content-type')).toBe('application/problem+json');
      expect(expired.headers.get('x-deadline-exceeded-by')).toBe('orders');
      expect(await expired.json()).toEqual({ title: 'Gateway Timeout', budgetMs: 100 });
      const refused = await fetch(`${url}/slow`, { headers: { 'x-request-deadline': '2' } });
      expect(refused.status).toBe(504);
      expect(await refused.json()).toEqual({ title: 'Gateway Timeout', budgetMs: 2 });
      throwing = true;
      const fallback = await fetch(`${url}/slow`);
      expect(fallback.status).toBe(504);
      expect(await fallback.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'orders' });
      expect(logs.filter((l) => l.msg === 'deadline: the answer hook threw')).toHaveLength(1);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('deadlineHandler on an HTTP/2 server (h2c)', () => {
  it('a client that resets its stream: the work is cancelled as one that left, the line says 499', async () => {
    const logs: LogLine[] = [];
    let started!: () => void;
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    let stopped!: (reason: unknown) => void;
    const stop = new Promise<unknown>((resolve) => {
      stopped = resolve;
    });
    // HTTP/2's compatibility response says `writableFinished` once its stream is reset, though never ended.
    const handler = deadlineHandler(
      (req: DeadlineRequest) => {
        req.deadline.context.onStop(stopped);
        started();
      },
      { serviceName: 'h2', logger: pino({ level: 'info' }, memoryDestination(logs)) },
    );
    const server = http2.createServer(handler as never);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const session = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    try {
      const stream = session.request({ ':path': '/wait', 'x-request-deadline': '4000' });
      stream.on('error', () => {});
      await running;
      stream.close(http2.constants.NGHTTP2_CANCEL);
      const reason = await stop;
      expect(reason).toBeInstanceOf(CancelledError);
      expect((reason as CancelledError).reason).toBe('client-disconnected');
      await expect
        .poll(() => logs.find((line) => line.path === '/wait'))
        .toMatchObject({ outcome: 'cancelled', statusCode: 499 });
    } finally {
      session.close();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('deadlineHandler admission', () => {
  it("reads a caller's urgency only from a trusted caller, and an exempt predicate that throws counts as exempt", async () => {
    const logs: LogLine[] = [];
    let sockets: Awaited<ReturnType<typeof openConnections>> = [];
    let during: Promise<unknown[]> | undefined;
    const server = createServer(
      deadlineHandler(
        (req, res) => {
          if (req.url === '/block') {
            // Written now, read once the loop is free again: they arrive on a loop just busy for 200 ms.
            during = Promise.all([
              sendOn(sockets[0] as never, '/work', { 'x-request-deadline': '150', priority: 'u=0' }),
              sendOn(sockets[1] as never, '/health', { 'x-request-deadline': '150' }),
            ]);
            const until = performance.now() + 200;
            while (performance.now() < until);
          }
          res.end('ok');
        },
        {
          serviceName: 'untrusting',
          logger: pino(memoryDestination(logs)),
          admission: {
            exempt: (req) => {
              if (req.url === '/health') throw new Error('the predicate failed');
              return false;
            },
          },
        },
      ),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      sockets = await openConnections(url, 2);
      const block = await openConnections(url, 1);
      expect((await sendOn(block[0] as never, '/block', {})).status).toBe(200);
      const [work, health] = (await during) as { status: number }[];
      // u=0 from a caller not trusted: ignored, judged as any other (the queue is longer than its budget).
      expect(work?.status).toBe(503);
      expect(health?.status).toBe(200);
      expect(logs.some((line) => /the admission.exempt hook threw/.test(String(line.msg)))).toBe(true);
    } finally {
      for (const socket of sockets) socket.destroy();
      server.closeAllConnections();
      server.close();
    }
  });
});
