/**
 * Messages that outlive the request that sent them, on the real NATS server: a plain `publish()` and a JetStream
 * publish carry the trace and never the deadline; a JetStream consumer's handler runs in a context with that trace
 * and a budget of its own.
 */
import { randomUUID } from 'node:crypto';
import { currentContext, DeadlineExceededError } from '@deadline/core';
import { REQUEST_DEADLINE_AT_HEADER, REQUEST_DEADLINE_HEADER } from '@deadline/core/wire';
import { AckPolicy, type JetStreamManager, type JsMsg, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NATS, requireService } from '../../../test/support/services.ts';
import { withDeadline, withJetStreamContext, withTrace } from '../src/index.ts';
import { connectNats, inRequest, runPrefix, signal, TRACE_ID } from './support.ts';

const available = await requireService(NATS);
const RUN = runPrefix('events');
const STREAM = `deadline_events_${randomUUID().slice(0, 8)}`;

describe.runIf(available)('events: the trace travels, the deadline does not', () => {
  let nc: NatsConnection;
  let jsm: JetStreamManager;

  beforeAll(async () => {
    nc = await connectNats();
    jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: STREAM, subjects: [`${RUN}.js.>`], duplicate_window: 60_000_000_000 });
  });
  afterAll(async () => {
    await jsm?.streams.delete(STREAM).catch(() => false);
    await nc?.close();
  });

  it('a plain publish carries the trace only; a wrapped subscriber runs it unbounded, in that trace', async () => {
    const subject = `${RUN}.plain`;
    const seen = signal<{ msg: Msg; budget: number | undefined; trace: string | undefined }>();
    const bus = withDeadline(nc, { serviceName: 'mailer' });
    bus.subscribe(subject, {
      callback: (_error, msg) => {
        const context = currentContext();
        seen.resolve({ msg, budget: context?.deadline.budgetMs, trace: context?.trace?.traceId });
      },
    });
    await nc.flush();
    inRequest(2_000, () => bus.publish(subject, 'changed'));
    const { msg, budget, trace } = await seen.promise;
    expect(msg.headers?.has(REQUEST_DEADLINE_HEADER)).toBe(false);
    expect(msg.headers?.get('traceparent')).toMatch(new RegExp(`^00-${TRACE_ID}-`));
    // Not the request's 2 s: the largest a timer takes (24.8 days), as good as none.
    expect(budget).toBe(2 ** 31 - 1);
    expect(trace).toBe(TRACE_ID);
  });

  it('a publish with a reply subject is a request: it carries the budget', async () => {
    const subject = `${RUN}.by-hand`;
    const seen = signal<Msg>();
    nc.subscribe(subject, { callback: (_error, msg) => seen.resolve(msg) });
    await nc.flush();
    const bus = withDeadline(nc);
    inRequest(2_000, () => bus.publish(subject, 'hi', { reply: `${RUN}.replies` }));
    const msg = await seen.promise;
    expect(Number(msg.headers?.get(REQUEST_DEADLINE_HEADER))).toBeLessThanOrEqual(2_000);
    expect(msg.headers?.has(REQUEST_DEADLINE_AT_HEADER)).toBe(true);
    // Without time left it is not published: the same refusal a request gets.
    expect(() => inRequest(0, () => bus.publish(subject, 'hi', { reply: `${RUN}.replies` }))).toThrow(
      DeadlineExceededError,
    );
  });

  it("JetStream: the stored message has the trace, not the deadline; JetStream's own headers still work", async () => {
    const js = withTrace(jetstream(nc));
    const subject = `${RUN}.js.created`;
    const id = randomUUID();
    const ack = await inRequest(2_000, () => js.publish(subject, 'order', { msgID: id }));
    expect(ack.duplicate).toBe(false);
    const again = await inRequest(2_000, () => js.publish(subject, 'order', { msgID: id }));
    expect(again.duplicate).toBe(true);
    const stored = await jsm.streams.getMessage(STREAM, { seq: ack.seq });
    expect(stored?.header.get('traceparent')).toMatch(new RegExp(`^00-${TRACE_ID}-`));
    expect(stored?.header.has(REQUEST_DEADLINE_HEADER)).toBe(false);
    expect(stored?.header.get('Nats-Msg-Id')).toBe(id);
  });

  it('JetStream: a publish without time left is not made', async () => {
    const js = withTrace(jetstream(nc), { minMs: 20 });
    const subject = `${RUN}.js.refused`;
    const before = (await jsm.streams.info(STREAM)).state.messages;
    const error = await inRequest(5, () => js.publish(subject, 'order')).catch((e: unknown) => e);
    expect(error).toMatchObject({ phase: 'before-call' });
    expect((await jsm.streams.info(STREAM)).state.messages).toBe(before);
  });

  it("JetStream consumer: each message runs with the publisher's trace and the consumer's own budget", async () => {
    const subject = `${RUN}.js.work`;
    const js = withTrace(jetstream(nc));
    await inRequest(1_000, () => js.publish(subject, 'fast'));
    await inRequest(1_000, () => js.publish(subject, 'stuck'));
    const name = `worker_${randomUUID().slice(0, 8)}`;
    await jsm.consumers.add(STREAM, { durable_name: name, ack_policy: AckPolicy.Explicit, filter_subject: subject });
    const consumer = await jetstream(nc).consumers.get(STREAM, name);
    const seen: { trace: string | undefined; budget: number | undefined; hop: string | undefined }[] = [];
    const process = withJetStreamContext(
      async (msg: JsMsg, signal) => {
        const context = currentContext();
        seen.push({ trace: context?.trace?.traceId, budget: context?.deadline.budgetMs, hop: context?.hop });
        // 'stuck' ignores its signal: the budget ends it anyway.
        if (msg.string() === 'stuck') await new Promise(() => {});
        expect(signal).toBeInstanceOf(AbortSignal);
        msg.ack();
      },
      { serviceName: 'worker', budgetMs: 300 },
    );
    const first = await consumer.next({ expires: 5_000 });
    await process(first as NonNullable<typeof first>);
    const second = await consumer.next({ expires: 5_000 });
    const started = performance.now();
    const error = await process(second as NonNullable<typeof second>).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(performance.now() - started).toBeLessThan(2_000);
    second?.nak();
    expect(seen).toEqual([
      { trace: TRACE_ID, budget: 300, hop: 'worker' },
      { trace: TRACE_ID, budget: 300, hop: 'worker' },
    ]);
  });
});
