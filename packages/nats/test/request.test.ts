/**
 * A wrapped connection's `request()` on the real NATS server, called from a request's deadline context: what the
 * message carries, how long the caller waits and with what error it stops, that nothing is sent without time left,
 * and that a reply that comes after the caller gave up is dropped and counted.
 */
import { currentContext, DeadlineExceededError, isDeadlineExceededError } from '@deadline/core';
import { REQUEST_DEADLINE_AT_HEADER, REQUEST_DEADLINE_HEADER } from '@deadline/core/wire';
import { type Msg, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NATS, requireService } from '../../../test/support/services.ts';
import { DEADLINE_STATUS, withDeadline } from '../src/index.ts';
import { connectNats, Dropped, inRequest, runPrefix, signal, TRACE_ID } from './support.ts';

const available = await requireService(NATS);
const RUN = runPrefix('request');

describe.runIf(available)('request() inside a deadline context', () => {
  let nc: NatsConnection;
  let responder: NatsConnection;
  const dropped = new Dropped();

  beforeAll(async () => {
    nc = await connectNats();
    responder = await connectNats();
  });
  afterAll(async () => {
    dropped.close();
    await nc?.close();
    await responder?.close();
  });

  /** A plain responder on `subject` (not wrapped) that answers what `answer` makes of each message. */
  async function respondWith(subject: string, answer: (msg: Msg) => void | Promise<void>): Promise<void> {
    responder.subscribe(subject, { callback: (_error, msg) => void answer(msg) });
    await responder.flush();
  }

  it('carries the budget, its wall-clock form and the trace; the reply comes back', async () => {
    const subject = `${RUN}.headers`;
    await respondWith(subject, (msg) => {
      msg.respond(JSON.stringify(Object.fromEntries([...(msg.headers ?? [])].map(([k, v]) => [k, v[0]]))));
    });
    const bus = withDeadline(nc, { publish: { marginMs: 50 } });
    const before = Date.now();
    const reply = await inRequest(2_000, () => bus.request(subject, 'hi'));
    const seen = reply.json<Record<string, string>>();
    const budget = Number(seen[REQUEST_DEADLINE_HEADER]);
    expect(budget).toBeGreaterThan(1_500);
    expect(budget).toBeLessThanOrEqual(1_950);
    // The same deadline on the publisher's wall clock: budget ms after it was written.
    const at = Number(seen[REQUEST_DEADLINE_AT_HEADER]);
    expect(at - before).toBeGreaterThanOrEqual(budget - 5);
    expect(at - Date.now()).toBeLessThanOrEqual(budget + 5);
    expect(seen.traceparent).toMatch(new RegExp(`^00-${TRACE_ID}-[0-9a-f]{16}-01$`));
  });

  it("keeps the app's own headers, unchanged, and its shorter timeout", async () => {
    const subject = `${RUN}.own`;
    let budget = Number.NaN;
    let custom: string | undefined;
    await respondWith(subject, (msg) => {
      budget = Number(msg.headers?.get(REQUEST_DEADLINE_HEADER));
      custom = msg.headers?.get('x-app');
      // no answer: the caller's own timeout ends it
    });
    const bus = withDeadline(nc);
    const own = natsHeaders();
    own.set('x-app', 'kept');
    const started = performance.now();
    const error = await inRequest(5_000, () => bus.request(subject, 'hi', { timeout: 300, headers: own })).catch(
      (e: unknown) => e,
    );
    const elapsed = performance.now() - started;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ whose: 'local', phase: 'during-call', target: subject });
    expect(elapsed).toBeGreaterThanOrEqual(295);
    expect(elapsed).toBeLessThan(2_000);
    expect(budget).toBeLessThanOrEqual(300);
    expect(budget).toBeGreaterThan(200);
    expect(custom).toBe('kept');
    // The app's headers object was copied, not changed.
    expect(own.has(REQUEST_DEADLINE_HEADER)).toBe(false);
  });

  it("ends at the request's deadline with a typed error naming whose deadline it was, and counts the late reply", async () => {
    const subject = `${RUN}.late`;
    const arrived = signal<Msg>();
    await respondWith(subject, (msg) => arrived.resolve(msg));
    const bus = withDeadline(nc, { publish: { marginMs: 20 } });
    const started = performance.now();
    const error = await inRequest(400, () => bus.request(subject, 'hi')).catch((e: unknown) => e);
    const elapsed = performance.now() - started;
    expect(isDeadlineExceededError(error)).toBe(true);
    expect(error).toMatchObject({ whose: 'local', hop: 'gateway', target: subject });
    // remaining − margin: 380 ms, give or take the event loop of a busy machine.
    expect(elapsed).toBeGreaterThanOrEqual(370);
    expect(elapsed).toBeLessThan(1_500);
    // The responder answers now, too late: dropped, and counted once.
    (await arrived.promise).respond('late');
    const event = await dropped.next(subject, 'late-reply');
    expect(event).toMatchObject({ protocol: 'nats', target: subject, reason: 'late-reply', hop: 'gateway' });
  });

  it('is not sent without time left: no message reaches the server', async () => {
    const subject = `${RUN}.refused`;
    const received: string[] = [];
    const fence = signal();
    responder.subscribe(`${subject}.>`, {
      callback: (_error, msg) => {
        received.push(msg.subject);
        if (msg.subject.endsWith('.fence')) fence.resolve();
      },
    });
    await responder.flush();
    const bus = withDeadline(nc, { publish: { minMs: 50 } });
    const error = await inRequest(30, () => bus.request(`${subject}.call`, 'hi')).catch((e: unknown) => e);
    expect(error).toMatchObject({ phase: 'before-call', target: `${subject}.call` });
    // A message published after it on the same connection arrives alone: the request was never written.
    nc.publish(`${subject}.fence`);
    await fence.promise;
    expect(received).toEqual([`${subject}.fence`]);
  });

  it("turns a responder's deadline answer into an error naming that hop", async () => {
    const subject = `${RUN}.answer`;
    await respondWith(subject, (msg) => {
      const h = natsHeaders(DEADLINE_STATUS, 'Deadline Exceeded');
      h.set('x-deadline-exceeded-by', 'inventory');
      msg.respond(new Uint8Array(0), { headers: h });
    });
    const bus = withDeadline(nc);
    const error = await inRequest(5_000, () => bus.request(subject, 'hi')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ whose: 'downstream:inventory', hop: 'inventory', target: subject });
  });

  it('says no responders at once, as the server does', async () => {
    const bus = withDeadline(nc);
    const started = performance.now();
    const error = await inRequest(5_000, () => bus.request(`${RUN}.nobody`, 'hi')).catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'NoRespondersError', code: '503' });
    expect((error as { isNoResponders(): boolean }).isNoResponders()).toBe(true);
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  it('passes straight through outside a context: the client itself', async () => {
    const subject = `${RUN}.outside`;
    await respondWith(subject, (msg) => {
      msg.respond(msg.headers?.has(REQUEST_DEADLINE_HEADER) ? 'budget' : 'none');
    });
    const bus = withDeadline(nc);
    expect((await bus.request(subject, 'hi')).string()).toBe('none');
    const error = await bus.request(`${RUN}.nobody`, 'hi').catch((e: unknown) => e);
    expect((error as Error).constructor.name).not.toBe('NoRespondersError');
  });

  it('bounds a request outside any context by publish.defaultMs', async () => {
    const subject = `${RUN}.default`;
    await respondWith(subject, () => {});
    const bus = withDeadline(nc, { publish: { defaultMs: 200 } });
    const started = performance.now();
    const error = await bus.request(subject, 'hi', { timeout: 10_000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(performance.now() - started).toBeLessThan(2_000);
  });

  it('gives the handler of a wrapped responder the context the caller sent', async () => {
    const subject = `${RUN}.context`;
    const server = withDeadline(responder, { serviceName: 'inventory' });
    server.subscribe(subject, {
      callback: (_error, msg) => {
        const context = currentContext();
        msg.respond(
          JSON.stringify({ remaining: context?.remainingMs(), hop: context?.hop, trace: context?.trace?.traceId }),
        );
      },
    });
    await responder.flush();
    const bus = withDeadline(nc);
    const reply = await inRequest(1_000, () => bus.request(subject, 'hi'));
    const seen = reply.json<{ remaining: number; hop: string; trace: string }>();
    expect(seen.hop).toBe('inventory');
    expect(seen.trace).toBe(TRACE_ID);
    expect(seen.remaining).toBeGreaterThan(500);
    expect(seen.remaining).toBeLessThanOrEqual(1_000);
  });
});
