/**
 * The same on `nats` 2.x, the client before `@nats-io/transport-node`: its connection has the same shape, and the
 * headers this package writes are the protocol's, not one client's objects.
 */
import { currentContext, DeadlineExceededError } from '@deadline/core';
import { REQUEST_DEADLINE_HEADER } from '@deadline/core/wire';
import { connect, headers, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NATS, requireService } from '../../../test/support/services.ts';
import { DEADLINE_STATUS, withDeadline } from '../src/index.ts';
import { Dropped, inRequest, runPrefix, signal, TRACE_ID } from './support.ts';

const available = await requireService(NATS);
const RUN = runPrefix('nats2');

describe.runIf(available)('nats 2.x', () => {
  let nc: NatsConnection;
  const dropped = new Dropped();
  beforeAll(async () => {
    nc = await connect({ servers: NATS.url });
  });
  afterAll(async () => {
    dropped.close();
    await nc?.close();
  });

  it('carries the budget and the trace to a wrapped responder, which runs in them', async () => {
    const subject = `${RUN}.context`;
    const bus = withDeadline(nc, { serviceName: 'inventory' });
    bus.subscribe(subject, {
      callback: (_error, msg) => {
        const context = currentContext();
        msg.respond(
          JSON.stringify({
            sent: msg.headers?.get(REQUEST_DEADLINE_HEADER),
            budget: context?.deadline.budgetMs,
            trace: context?.trace?.traceId,
          }),
        );
      },
    });
    await nc.flush();
    const reply = await inRequest(1_000, () => bus.request(subject, 'hi'));
    const seen = JSON.parse(new TextDecoder().decode(reply.data)) as { sent: string; budget: number; trace: string };
    expect(Number(seen.sent)).toBeLessThanOrEqual(1_000);
    expect(seen.budget).toBeLessThanOrEqual(Number(seen.sent));
    expect(seen.trace).toBe(TRACE_ID);
  });

  it('answers an expired request with the deadline answer, which a wrapped caller turns into the typed error', async () => {
    const subject = `${RUN}.expired`;
    const bus = withDeadline(nc, { serviceName: 'inventory' });
    bus.subscribe(subject, { callback: () => {} });
    await nc.flush();
    const h = headers();
    h.set(REQUEST_DEADLINE_HEADER, '1000');
    h.set('x-request-deadline-at', String(Date.now() - 5_000));
    const plain = await nc.request(subject, 'hi', { headers: h, timeout: 5_000 });
    expect(plain.headers?.code).toBe(DEADLINE_STATUS);
    // A handler that never answers: the deadline answer at the responder's deadline (its default 200 ms).
    const strict = withDeadline(nc, { serviceName: 'strict', defaultMs: 200 });
    strict.subscribe(`${subject}.slow`, { callback: () => {} });
    await nc.flush();
    const error = await inRequest(5_000, () => bus.request(`${subject}.slow`, 'hi')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ whose: 'downstream:strict' });
  });

  it('counts a late reply', async () => {
    const subject = `${RUN}.late`;
    const arrived = signal<{ respond(data: string): boolean }>();
    nc.subscribe(subject, { callback: (_error, msg) => arrived.resolve(msg) });
    await nc.flush();
    const bus = withDeadline(nc);
    const error = await inRequest(200, () => bus.request(subject, 'hi')).catch((e: unknown) => e);
    expect(error).toMatchObject({ whose: 'local' });
    (await arrived.promise).respond('late');
    await dropped.next(subject, 'late-reply');
  });
});
