/**
 * Detached work and BullMQ jobs with OpenTelemetry registered (the real SDK, an in-memory exporter): each is a
 * span of its own, the child of the span that started it, and its context's trace is that span's.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { currentContext, runWithDeadline, type TraceContext } from '@deadline/core';
import { context, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { type Job, Queue, Worker } from 'bullmq';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { REDIS, requireService } from '../../../test/support/services.ts';
import { enqueue, runInBackground, withJobContext } from '../src/index.ts';

const exporter = new InMemorySpanExporter();
const tracer = () => trace.getTracer('test');

beforeAll(() => {
  new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }).register();
});
afterAll(() => {
  trace.disable();
  context.disable();
  propagation.disable();
});
beforeEach(() => exporter.reset());

const spanNamed = (name: string) => exporter.getFinishedSpans().find((span) => span.name === name);

describe('runInBackground() with OpenTelemetry', () => {
  it('the task is a span of its own under the request’s, and its context carries the span’s ids', async () => {
    let seen: TraceContext | undefined;
    const outcome = await tracer().startActiveSpan('GET /order', async (request) => {
      const done = runWithDeadline(500, () =>
        runInBackground('audit', async () => {
          seen = currentContext()?.trace;
          // What the task starts nests under its span.
          tracer().startSpan('insert audit').end();
        }),
      );
      request.end();
      return done;
    });
    expect(outcome.outcome).toBe('ok');
    const requestSpan = spanNamed('GET /order');
    const task = spanNamed('background audit');
    expect(task?.spanContext().traceId).toBe(requestSpan?.spanContext().traceId);
    expect(task?.parentSpanContext?.spanId).toBe(requestSpan?.spanContext().spanId);
    expect(task?.kind).toBe(SpanKind.INTERNAL);
    expect(task?.attributes).toMatchObject({ 'deadline.task': 'audit', 'deadline.outcome': 'ok' });
    expect(seen).toMatchObject({ traceId: task?.spanContext().traceId, spanId: task?.spanContext().spanId });
    expect(spanNamed('insert audit')?.parentSpanContext?.spanId).toBe(task?.spanContext().spanId);
  });

  it('a task that runs out of its own budget: the moment is an event, the outcome and an error status', async () => {
    const outcome = await runInBackground(
      'slow',
      async () => {
        const signal = currentContext()?.signal as AbortSignal;
        await sleep(5_000, undefined, { signal }).catch(() => {});
        signal.throwIfAborted();
      },
      { budgetMs: 50 },
    );
    expect(outcome.outcome).toBe('deadline');
    const task = spanNamed('background slow');
    expect(task?.attributes).toMatchObject({ 'deadline.budget_ms': 50, 'deadline.outcome': 'deadline_exceeded' });
    expect(task?.status.code).toBe(SpanStatusCode.ERROR);
    const fired = task?.events.find((event) => event.name === 'deadline.exceeded');
    expect(fired?.attributes?.['deadline.elapsed_ms']).toBeGreaterThanOrEqual(49);
  });

  it('outside any span and any request: a root span, a trace of its own', async () => {
    let seen: TraceContext | undefined;
    await runInBackground('startup', async () => {
      seen = currentContext()?.trace;
    });
    const task = spanNamed('background startup');
    expect(task?.parentSpanContext).toBeUndefined();
    expect(seen?.traceId).toBe(task?.spanContext().traceId);
  });
});

const redis = await requireService(REDIS);

describe.runIf(redis)('BullMQ jobs with OpenTelemetry (Redis)', () => {
  const { hostname, port } = new URL(REDIS.url);
  const connection = { host: hostname, port: Number(port || 6379), maxRetriesPerRequest: null };
  const queue = new Queue(`deadline-otel-${process.pid}`, { connection });
  let worker: Worker | undefined;
  afterAll(async () => {
    await worker?.close(true);
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
  });

  it('an attempt is a consumer span, the child of the span that enqueued it; its context carries the span', async () => {
    let seen: TraceContext | undefined;
    const processed = new Promise<void>((resolve) => {
      worker = new Worker(
        queue.name,
        withJobContext(async (_job: Job) => {
          seen = currentContext()?.trace;
          resolve();
        }),
        { connection },
      );
      worker.on('error', () => {});
    });
    const completed = new Promise<void>((resolve) => worker?.once('completed', () => resolve()));
    await tracer().startActiveSpan('POST /orders', async (request) => {
      await runWithDeadline(1_000, () => enqueue(queue, 'mail', { to: 'a@b.c' }, { budgetMs: 2_000 }));
      request.end();
    });
    await processed;
    await completed;
    const enqueuer = spanNamed('POST /orders');
    const attempt = exporter.getFinishedSpans().find((span) => span.name === `process ${queue.name}`);
    expect(attempt?.kind).toBe(SpanKind.CONSUMER);
    expect(attempt?.spanContext().traceId).toBe(enqueuer?.spanContext().traceId);
    expect(attempt?.parentSpanContext?.spanId).toBe(enqueuer?.spanContext().spanId);
    expect(attempt?.attributes).toMatchObject({
      'messaging.system': 'bullmq',
      'messaging.destination.name': queue.name,
      'deadline.budget_ms': 2_000,
      'deadline.outcome': 'ok',
    });
    expect(seen).toMatchObject({ traceId: attempt?.spanContext().traceId, spanId: attempt?.spanContext().spanId });
  });
});
