/**
 * The library with OpenTelemetry's grpc instrumentation loaded, as services run it: the instrumentation wraps the
 * client's methods and the server's handlers, and writes the trace into the metadata itself; the deadline still
 * bounds each call, a call without time is still not made, the handler's context is in the caller's trace, and a
 * caller's own deadline is a deadline on the server's span.
 */
import { createRequire } from 'node:module';
import { type currentContext, type DeadlineExceededError, findDeadlineError, runWithDeadline } from '@deadline/core';
import type { ServiceError } from '@grpc/grpc-js';
import { context, propagation, SpanKind, trace } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { GrpcInstrumentation } from '@opentelemetry/instrumentation-grpc';
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grpcFrame, inspectRequest } from '../../../test/support/grpc-wire.ts';
import { rawGrpc, rawSession } from '../../../test/support/raw-http2.ts';
import { watchingTheLoop } from '../../server/test/loop-lateness.ts';

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register();
const instrumentations = registerInstrumentations({ instrumentations: [new GrpcInstrumentation()] });
// Through require(), where the instrumentation hooks grpc-js; the test service and the library load it after.
const grpc = createRequire(import.meta.url)('@grpc/grpc-js') as typeof import('@grpc/grpc-js');
const { client, leftAfter, next, serve, unary } = await import('./support.ts');
const { GRPC_JS_TIMER_LEAD_MS } = await import('../src/incoming-call.ts');
/**
 * How late the event loop may run and grpc-js's own answer to the caller's deadline (its timer fires early by the
 * loop's lateness), should it go first, still be read as that deadline for sure: the library reads a cancel within
 * 100 ms of the deadline as the deadline (core's `AT_THE_DEADLINE_MS`); half of that is sure.
 */
const SURELY_ON_TIME_MS = 50;
type Served = Awaited<ReturnType<typeof serve>>;

let inventory: Served;
beforeAll(async () => {
  inventory = await serve({ serviceName: 'inventory', maxMs: 5_000 });
});
afterAll(async () => {
  await inventory?.close();
  instrumentations();
  await provider.shutdown();
  trace.disable();
  context.disable();
  propagation.disable();
});

const tracer = trace.getTracer('test');

describe('with @opentelemetry/instrumentation-grpc', () => {
  it("bounds the call, and the handler runs in the caller's trace", async () => {
    const c = client(inventory.address, { marginMs: 50 });
    const inspected = next<ReturnType<typeof currentContext>>('inspect');
    const started = performance.now();
    const { traceId, seen } = await tracer.startActiveSpan('request', async (span) => {
      const seen = await runWithDeadline(800, () => unary<{ budgetMs: number }>(c, 'inspect', {}));
      span.end();
      return { traceId: span.spanContext().traceId, seen };
    });
    expect(seen.budgetMs).toBeLessThanOrEqual(750);
    expect(seen.budgetMs).toBeGreaterThanOrEqual(leftAfter(800, started, 50));
    expect((await inspected)?.trace?.traceId).toBe(traceId);
    const spans = exporter.getFinishedSpans();
    expect(spans.some((s) => s.kind === SpanKind.CLIENT && s.spanContext().traceId === traceId)).toBe(true);
    expect(spans.some((s) => s.kind === SpanKind.SERVER && s.spanContext().traceId === traceId)).toBe(true);
    c.close();
  });

  it('does not make a call without time: DEADLINE_EXCEEDED on its span too, no connection', async () => {
    exporter.reset();
    const c = client(inventory.address, { marginMs: 20 });
    const error = (await runWithDeadline(10, () => unary(c, 'inspect', {})).catch(
      (e: ServiceError) => e,
    )) as ServiceError;
    expect(error.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect((findDeadlineError(error) as DeadlineExceededError).phase).toBe('before-call');
    expect(c.getChannel().getConnectivityState(false)).toBe(grpc.connectivityState.IDLE);
    const [span] = exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.CLIENT);
    expect(span?.attributes['rpc.grpc.status_code']).toBe(grpc.status.DEADLINE_EXCEEDED);
    c.close();
  });

  it("puts a caller's own deadline on the server's span as DEADLINE_EXCEEDED, not as the caller cancelling", async () => {
    exporter.reset();
    // A client without a timer of its own (no gRPC library), so that the server's answer is what ends the call.
    const session = rawSession(`http://${inventory.address}`);
    const { value: answer, worstMs } = await watchingTheLoop(() =>
      rawGrpc(session, '/deadline.test.Inventory/Inspect', { 'grpc-timeout': '100m' }, grpcFrame(inspectRequest(true))),
    );
    session.close();
    expect(answer.grpcStatus).toBe('4');
    // The server answers, naming itself, GRPC_JS_TIMER_LEAD_MS before grpc-js's own timer would answer without the
    // trailer: sure to when the event loop never ran later than that (grpc-js's timer, armed on the loop's lagging
    // clock, fires early by as much).
    if (worstMs < GRPC_JS_TIMER_LEAD_MS) expect(answer.exceededBy).toBe('inventory');
    else expect([undefined, 'inventory']).toContain(answer.exceededBy);
    await expect.poll(() => exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.SERVER)).toHaveLength(1);
    const [span] = exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.SERVER);
    const code = span?.attributes['rpc.grpc.status_code'];
    if (worstMs <= SURELY_ON_TIME_MS) expect(code).toBe(grpc.status.DEADLINE_EXCEEDED);
    else expect([grpc.status.DEADLINE_EXCEEDED, grpc.status.CANCELLED]).toContain(code);
  });

  it("answers DEADLINE_EXCEEDED naming the hop when the server's deadline passes first", async () => {
    const tight = await serve({ serviceName: 'stock', maxMs: 150 });
    const c = client(tight.address);
    const error = (await runWithDeadline(5_000, () => unary(c, 'inspect', { wait: true })).catch(
      (e: ServiceError) => e,
    )) as ServiceError;
    expect(error.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect((findDeadlineError(error) as DeadlineExceededError).whose).toBe('downstream:stock');
    c.close();
    await tight.close();
  });
});
