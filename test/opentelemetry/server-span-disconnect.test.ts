/**
 * A client that leaves before its answer: the server span OpenTelemetry's http instrumentation made for the
 * request says so (`deadline.outcome: cancelled`), for each adapter. The instrumentation ends that span when the
 * response closes, so the request's end must be heard before the response's own `close` listeners run.
 */
import { once } from 'node:events';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import { type AddressInfo, connect } from 'node:net';
import { SpanKind } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { NodeTracerProvider, type ReadableSpan, type SpanProcessor } from '@opentelemetry/sdk-trace-node';
import { afterAll, describe, expect, it } from 'vitest';

/** Hands over each server span as it ends. */
class ServerSpans implements SpanProcessor {
  #waiting: ((span: ReadableSpan) => void)[] = [];
  next(): Promise<ReadableSpan> {
    return new Promise((resolve) => this.#waiting.push(resolve));
  }
  onStart(): void {}
  onEnd(span: ReadableSpan): void {
    if (span.kind === SpanKind.SERVER) this.#waiting.shift()?.(span);
  }
  forceFlush(): Promise<void> {
    return Promise.resolve();
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

const spans = new ServerSpans();
const provider = new NodeTracerProvider({ spanProcessors: [spans] });
provider.register();
const instrumentations = registerInstrumentations({ instrumentations: [new HttpInstrumentation()] });
// Through require(), where the instrumentation hooks node:http; the adapters after it.
const require = createRequire(import.meta.url);
const http = require('node:http') as typeof import('node:http');
const Fastify = require('fastify') as typeof import('fastify').default;
const express = require('express') as typeof import('express');
const { fastifyDeadline } = await import('@deadline/fastify');
const { deadline } = await import('@deadline/express');
const { deadlineHandler } = await import('@deadline/server');

afterAll(async () => {
  instrumentations();
  await provider.shutdown();
});

/**
 * Sends a request on a raw socket, waits until the app has it, closes the socket, and checks the request's server
 * span; then `close()`s the app.
 */
async function expectCancelledSpan(server: Server, arrived: Promise<void>, close: () => unknown): Promise<void> {
  try {
    if (!server.listening) await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const ended = spans.next();
    const socket = connect(port, '127.0.0.1', () => socket.write('GET /slow HTTP/1.1\r\nHost: test\r\n\r\n'));
    await arrived;
    socket.destroy();
    expect((await ended).attributes['deadline.outcome']).toBe('cancelled');
  } finally {
    await close();
  }
}

/** Closes a node:http server and its connections. */
const closeServer = (server: Server) => () => {
  server.closeAllConnections();
  server.close();
};

/** A promise the route resolves when the request reaches it (the route never answers). */
function arrival(): { arrived: Promise<void>; arrive: () => void } {
  let arrive = () => {};
  const arrived = new Promise<void>((resolve) => {
    arrive = resolve;
  });
  return { arrived, arrive };
}

describe('a client that leaves: the http instrumentation’s server span carries the outcome', () => {
  it('fastify', async () => {
    const { arrived, arrive } = arrival();
    const app = Fastify();
    await app.register(fastifyDeadline, { serviceName: 'svc' });
    app.get('/slow', (_request, _reply) => {
      arrive();
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    await expectCancelledSpan(app.server, arrived, () => app.close());
  });

  it('express', async () => {
    const { arrived, arrive } = arrival();
    const app = express();
    app.use(deadline({ serviceName: 'svc' }));
    app.get('/slow', () => arrive());
    const server = app.listen(0, '127.0.0.1');
    await expectCancelledSpan(server, arrived, closeServer(server));
  });

  it('node:http', async () => {
    const { arrived, arrive } = arrival();
    const server = http.createServer(
      deadlineHandler((_req: IncomingMessage, _res: ServerResponse) => arrive(), { serviceName: 'svc' }),
    );
    server.listen(0, '127.0.0.1');
    await expectCancelledSpan(server, arrived, closeServer(server));
  });
});
