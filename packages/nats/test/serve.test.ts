/**
 * A wrapped connection's subscriptions on the real NATS server: the handler runs in the deadline its message brought,
 * less the time the message surely spent on the way; a message with no time left is not handled, but counted,
 * logged and (a request) answered with the deadline answer; an answer after the deadline is not sent; work the
 * handler started — a PostgreSQL statement through @deadline/pg — is cancelled on the server at the deadline.
 */
import { currentContext, DeadlineExceededError } from '@deadline/core';
import { DEADLINE_EXCEEDED_BY_HEADER, REQUEST_DEADLINE_AT_HEADER, REQUEST_DEADLINE_HEADER } from '@deadline/core/wire';
import { withDeadline as withPgDeadline } from '@deadline/pg';
import { createInbox, type Msg, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectEachTestLives } from '../../../test/support/process-watch.ts';
import { NATS, POSTGRES, requireService } from '../../../test/support/services.ts';
import { marker, ServerActivity } from '../../pg/test/support/activity.ts';
import { DEADLINE_STATUS, handle, withDeadline } from '../src/index.ts';
import { connectNats, Dropped, inRequest, MemoryLogger, runPrefix, signal } from './support.ts';

const available = (await requireService(NATS)) && (await requireService(POSTGRES));
const RUN = runPrefix('serve');

/** Budget headers as a publisher wrote them `waitedMs` ago, with `budgetMs` then left. */
function sentAgo(budgetMs: number, waitedMs: number) {
  const h = natsHeaders();
  h.set(REQUEST_DEADLINE_HEADER, String(budgetMs));
  h.set(REQUEST_DEADLINE_AT_HEADER, String(Date.now() - waitedMs + budgetMs));
  return h;
}

describe.runIf(available)('handlers of a wrapped connection', () => {
  // A handler whose statement was cancelled rejects with the deadline error: answered here, never unhandled.
  expectEachTestLives();
  let nc: NatsConnection;
  let server: NatsConnection;
  const dropped = new Dropped();
  const logger = new MemoryLogger();

  beforeAll(async () => {
    nc = await connectNats();
    server = await connectNats();
  });
  afterAll(async () => {
    dropped.close();
    await nc?.close();
    await server?.close();
  });

  /** Collects every message sent to a fresh inbox of the caller's (a request made by hand, seeing all its answers). */
  async function inbox(): Promise<{ subject: string; messages: Msg[]; first: Promise<Msg> }> {
    const subject = createInbox();
    const messages: Msg[] = [];
    const first = signal<Msg>();
    nc.subscribe(subject, {
      callback: (_error, msg) => {
        messages.push(msg);
        first.resolve(msg);
      },
    });
    await nc.flush();
    return { subject, messages, first: first.promise };
  }

  it('runs the handler with the budget the message brought, less the time it surely waited', async () => {
    const subject = `${RUN}.waited`;
    const bus = withDeadline(server, { serviceName: 'inventory', logger });
    bus.subscribe(subject, {
      callback: (_error, msg) => {
        msg.respond(JSON.stringify({ budget: currentContext()?.deadline.budgetMs }));
      },
    });
    const raw = withDeadline(server, { serviceName: 'inventory', clockSkewMs: false });
    raw.subscribe(`${subject}.raw`, {
      callback: (_error, msg) => {
        msg.respond(JSON.stringify({ budget: currentContext()?.deadline.budgetMs }));
      },
    });
    await server.flush();
    // Published with 2,000 ms left, 500 ms ago: 2,000 − (500 − the clock skew allowed, 10 ms by default).
    const reply = await nc.request(subject, 'hi', { headers: sentAgo(2_000, 500), timeout: 5_000 });
    const { budget } = reply.json<{ budget: number }>();
    // At most 1,510 (it waited at least 490 ms, for sure); less by however long it took to get here on a busy machine.
    expect(budget).toBeLessThanOrEqual(1_510);
    expect(budget).toBeGreaterThan(1_000);
    // clockSkewMs false: the wall clock is not read, the budget starts on arrival.
    const unread = await nc.request(`${subject}.raw`, 'hi', { headers: sentAgo(2_000, 500), timeout: 5_000 });
    expect(unread.json<{ budget: number }>().budget).toBe(2_000);
    const line = await logger.line(subject);
    expect(line.object).toMatchObject({ hop: 'inventory', budgetSource: 'header', outcome: 'ok' });
    expect(line.object.waitedMs).toBeGreaterThanOrEqual(445);
  });

  it('does not handle a message whose budget is gone: counted, logged once, the request given the deadline answer', async () => {
    const subject = `${RUN}.expired`;
    let handled = 0;
    const bus = withDeadline(server, { serviceName: 'inventory', logger });
    bus.subscribe(subject, {
      callback: () => {
        handled++;
      },
    });
    await server.flush();
    const answers = await inbox();
    // 1,000 ms left when published, 1,200 ms ago.
    nc.publish(subject, 'hi', { reply: answers.subject, headers: sentAgo(1_000, 1_200) });
    const answer = await answers.first;
    expect(answer.data.length).toBe(0);
    expect(answer.headers?.code).toBe(DEADLINE_STATUS);
    expect(answer.headers?.get(DEADLINE_EXCEEDED_BY_HEADER)).toBe('inventory');
    const event = await dropped.next(subject, 'expired');
    expect(event).toMatchObject({ protocol: 'nats', reason: 'expired', hop: 'inventory', budgetMs: 0 });
    expect(event.waitedMs).toBeGreaterThanOrEqual(1_000);
    const line = await logger.line(subject);
    expect(line.level).toBe('warn');
    expect(line.object).toMatchObject({ outcome: 'deadline_exceeded', code: 'expired', budgetMs: 0 });
    expect(logger.lines.filter((l) => l.object.method === subject)).toHaveLength(1);
    // An event with no time left: counted, nobody answered.
    nc.publish(subject, 'event', { headers: sentAgo(100, 500) });
    await nc.flush();
    await expect.poll(() => dropped.count(subject, 'expired')).toBe(2);
    expect(handled).toBe(0);
  });

  it('answers at the deadline, and not after: a late respond() is not sent, but counted', async () => {
    const subject = `${RUN}.late-answer`;
    const release = signal();
    const responded = signal<boolean>();
    const bus = withDeadline(server, { serviceName: 'inventory', logger });
    bus.subscribe(subject, {
      callback: async (_error, msg) => {
        await release.promise;
        responded.resolve(msg.respond('too late'));
      },
    });
    await server.flush();
    const answers = await inbox();
    nc.publish(subject, 'hi', { reply: answers.subject, headers: sentAgo(300, 0) });
    const first = await answers.first;
    expect(first.headers?.code).toBe(DEADLINE_STATUS);
    expect(first.headers?.get(DEADLINE_EXCEEDED_BY_HEADER)).toBe('inventory');
    release.resolve();
    expect(await responded.promise).toBe(false);
    await dropped.next(subject, 'late-answer');
    // A message sent after it on the same path arrives alone: the late answer never went.
    nc.publish(answers.subject, 'fence');
    await expect.poll(() => answers.messages.length).toBe(2);
    expect(answers.messages[1]?.string()).toBe('fence');
    expect((await logger.line(subject)).object).toMatchObject({ outcome: 'deadline_exceeded' });
  });

  it("cancels the handler's PostgreSQL statement on the server at its deadline; the caller learns whose it was", async () => {
    const subject = `${RUN}.sleep`;
    const pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2 });
    const db = withPgDeadline(pool);
    const activity = await ServerActivity.open();
    const mark = marker();
    const failed = signal<unknown>();
    try {
      // The service gives an untrusted caller at most 400 ms, whatever it asks.
      const bus = withDeadline(server, { serviceName: 'inventory', defaultMs: 400 });
      bus.subscribe(subject, {
        callback: async (_error, msg) => {
          try {
            await db.query(`SELECT pg_sleep(10) /* ${mark} */`);
            msg.respond('slept');
          } catch (error) {
            failed.resolve(error);
            throw error;
          }
        },
      });
      await server.flush();
      const caller = withDeadline(nc);
      const started = performance.now();
      const call = inRequest(5_000, () => caller.request(subject, 'hi')).catch((e: unknown) => e);
      await activity.startedRunning(mark);
      const gone = await activity.goneAt(mark);
      const error = await call;
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(error).toMatchObject({ whose: 'downstream:inventory' });
      expect(await failed.promise).toBeInstanceOf(DeadlineExceededError);
      expect(gone - started).toBeGreaterThanOrEqual(350);
      expect(gone - started).toBeLessThan(2_500);
      expect(performance.now() - started).toBeLessThan(3_000);
    } finally {
      await activity.end();
      await pool.end();
    }
  });

  it('ends a request whose callback returned no promise when it is answered, not before', async () => {
    const subject = `${RUN}.ends`;
    const bus = withDeadline(server, { serviceName: 'inventory', logger });
    const later = signal<Msg>();
    bus.subscribe(subject, { callback: (_error, msg) => later.resolve(msg) });
    await server.flush();
    const reply = nc.request(subject, 'hi', { timeout: 5_000 });
    const msg = await later.promise;
    // The callback returned long ago; the message is not over until it is answered.
    expect(logger.lines.some((l) => l.object.method === subject)).toBe(false);
    msg.respond('done');
    expect((await reply).string()).toBe('done');
    const line = await logger.line(subject);
    expect(line.object).toMatchObject({ outcome: 'ok', budgetSource: 'default' });
  });

  it('handles an iterated subscription with handle(), several at a time, each in its context', async () => {
    const subject = `${RUN}.iterated`;
    const bus = withDeadline(server, { serviceName: 'inventory' });
    const sub = bus.subscribe(subject);
    let running = 0;
    let most = 0;
    const both = signal();
    const served = handle(
      sub,
      async (msg) => {
        running++;
        most = Math.max(most, running);
        if (running === 2) both.resolve();
        await both.promise;
        running--;
        msg.respond(String(currentContext()?.deadline.budgetMs));
      },
      { concurrency: 2 },
    );
    await server.flush();
    const caller = withDeadline(nc);
    const replies = await inRequest(3_000, () =>
      Promise.all([caller.request(subject, 'a'), caller.request(subject, 'b')]),
    );
    expect(most).toBe(2);
    for (const reply of replies) expect(Number(reply.string())).toBeLessThanOrEqual(3_000);
    sub.unsubscribe();
    await served;
  });

  it('refuses a subscription handle() cannot know', async () => {
    await expect(handle(server.subscribe(`${RUN}.unknown`), () => {})).rejects.toThrow(/withDeadline/);
  });
});
