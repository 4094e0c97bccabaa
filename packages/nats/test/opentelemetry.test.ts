/**
 * With OpenTelemetry registered (the real SDK): nothing of OpenTelemetry's writes NATS headers, so a message is made
 * the child of the span active where it is sent — a request and an event alike.
 */
import { runWithDeadline } from '@deadline/core';
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import { context, propagation, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NATS, requireService } from '../../../test/support/services.ts';
import { withDeadline } from '../src/index.ts';
import { connectNats, runPrefix, signal } from './support.ts';

const available = await requireService(NATS);
const RUN = runPrefix('otel');

describe.runIf(available)('messages with OpenTelemetry', () => {
  let nc: NatsConnection;
  beforeAll(async () => {
    new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(new InMemorySpanExporter())] }).register();
    nc = await connectNats();
  });
  afterAll(async () => {
    trace.disable();
    context.disable();
    propagation.disable();
    await nc?.close();
  });

  it('a request and an event carry the active span as their parent', async () => {
    const seen: Msg[] = [];
    const both = signal();
    nc.subscribe(`${RUN}.>`, {
      callback: (_error, msg) => {
        seen.push(msg);
        if (msg.reply) msg.respond('ok');
        if (seen.length === 2) both.resolve();
      },
    });
    await nc.flush();
    const bus = withDeadline(nc);
    const ids = await trace.getTracer('test').startActiveSpan('GET /order', async (span) => {
      await runWithDeadline(2_000, async () => {
        await bus.request(`${RUN}.request`, 'hi');
        bus.publish(`${RUN}.event`, 'changed');
      });
      span.end();
      return span.spanContext();
    });
    await both.promise;
    for (const msg of seen) {
      expect(msg.headers?.get('traceparent')).toBe(`00-${ids.traceId}-${ids.spanId}-01`);
    }
    expect(seen[0]?.headers?.has('x-request-deadline')).toBe(true);
  });
});
