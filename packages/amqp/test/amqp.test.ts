/**
 * What is RabbitMQ's own in `@deadline/amqp`, on the real broker (the behaviour it shares with @deadline/nats is the
 * messaging conformance suite's, conformance.test.ts): a request's `expiration` and the broker dropping a request
 * nobody waits for; publishes through `publish()`/`sendToQueue()` (requests, events, outside a context, refused); a
 * consumer's handler inside what is left after a real wait in the queue; an expired message acknowledged or
 * dead-lettered; `clockSkewMs: false`; events consumed without a deadline; `request()` outside a context; undoing.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import {
  currentContext,
  DeadlineExceededError,
  remainingMs,
  runWithContext,
  traceFrom,
  withoutCancel,
} from '@deadline/core';
import amqp, { type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProcessLives } from '../../../test/support/process-watch.ts';
import { POSTGRES, RABBITMQ, requireService } from '../../../test/support/services.ts';
import { request, withDeadline, withoutDeadline } from '../src/index.ts';
import { deferred, droppedMessages, Lines, queueName } from './support.ts';

const run = promisify(execFile);
const TRACE = traceFrom('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
const available = (await requireService(RABBITMQ)) && (await requireService(POSTGRES));

/** Runs `fn` as a request of `budgetMs` at hop `gateway`, with the test's trace. */
function inRequest<T>(budgetMs: number, fn: () => T): T {
  return runWithContext({ deadline: budgetMs, hop: 'gateway', trace: TRACE }, fn);
}

describe.runIf(available)('@deadline/amqp on RabbitMQ', () => {
  let connection: ChannelModel;
  /** The app's channel, bounded per test. */
  let channel: Channel;
  /** A plain channel: what a consumer or publisher that does not use the library sees and sends. */
  let plain: Channel;
  const lines = new Lines();

  beforeAll(async () => {
    connection = await amqp.connect(RABBITMQ.url);
    channel = withDeadline(await connection.createChannel(), { serviceName: 'stock', logger: lines.logger });
    plain = await connection.createChannel();
  });
  afterAll(async () => {
    await connection?.close();
  });

  async function queue(name: string, options: amqp.Options.AssertQueue = {}): Promise<string> {
    const q = queueName(name);
    await plain.assertQueue(q, { durable: false, autoDelete: false, ...options });
    return q;
  }

  /** The next message on `q`, taken with a plain channel. */
  async function nextOn(q: string): Promise<ConsumeMessage> {
    const got = deferred<ConsumeMessage>();
    const { consumerTag } = await plain.consume(q, (m) => m && got.resolve(m), { noAck: true });
    const message = await got.promise;
    await plain.cancel(consumerTag);
    return message;
  }

  describe('publishing', () => {
    it('a request carries the remaining budget, its wall-clock deadline and the trace, and expires with them', async () => {
      const q = await queue('request-carries');
      const before = Date.now();
      inRequest(800, () => channel.sendToQueue(q, Buffer.from('x'), { replyTo: 'somewhere', headers: { app: 'own' } }));
      const { properties } = await nextOn(q);
      const headers = properties.headers as Record<string, unknown>;
      const budget = Number(headers['x-request-deadline']);
      expect(budget).toBeGreaterThan(500);
      expect(budget).toBeLessThanOrEqual(800);
      expect(Number(headers['x-request-deadline-at'])).toBeGreaterThanOrEqual(before + budget - 5);
      expect(Number(headers['x-request-deadline-at'])).toBeLessThanOrEqual(Date.now() + budget);
      expect(String(headers.traceparent)).toContain(TRACE.traceId);
      expect(headers.app).toBe('own');
      expect(Number(properties.expiration)).toBe(budget);
    });

    it('an app’s shorter expiration stands; marginMs is kept back', async () => {
      const q = await queue('own-expiration');
      withDeadline(channel, { serviceName: 'stock', logger: lines.logger, publish: { marginMs: 100 } });
      try {
        inRequest(800, () => channel.sendToQueue(q, Buffer.from('x'), { replyTo: 'r', expiration: '150' }));
        const first = await nextOn(q);
        expect(first.properties.expiration).toBe('150');
        expect(Number(first.properties.headers?.['x-request-deadline'])).toBeLessThanOrEqual(700);
      } finally {
        withDeadline(channel, { serviceName: 'stock', logger: lines.logger });
      }
    });

    it('an event carries the trace, never the deadline; outside a context nothing is added', async () => {
      const q = await queue('event');
      inRequest(800, () => channel.publish('', q, Buffer.from('event')));
      const event = await nextOn(q);
      expect(event.properties.headers?.traceparent).toContain(TRACE.traceId);
      expect(event.properties.headers?.['x-request-deadline']).toBeUndefined();
      expect(event.properties.expiration).toBeUndefined();
      // A context made to outlive the request (withoutCancel) publishes its requests with the trace only.
      inRequest(800, () => withoutCancel(() => channel.sendToQueue(q, Buffer.from('job'), { replyTo: 'r' })));
      const job = await nextOn(q);
      expect(job.properties.headers?.traceparent).toContain(TRACE.traceId);
      expect(job.properties.headers?.['x-request-deadline']).toBeUndefined();
      channel.sendToQueue(q, Buffer.from('outside'), { replyTo: 'r' });
      const outside = await nextOn(q);
      expect(outside.properties.headers ?? {}).toEqual({});
      expect(outside.properties.expiration).toBeUndefined();
    });

    it('too little time left: the request is not published, a DeadlineExceededError at once', async () => {
      const q = await queue('refused');
      withDeadline(channel, { serviceName: 'stock', logger: lines.logger, publish: { minMs: 500 } });
      try {
        const refusal = (() => {
          try {
            inRequest(300, () => channel.sendToQueue(q, Buffer.from('refused'), { replyTo: 'r' }));
          } catch (error) {
            return error;
          }
          return undefined;
        })();
        expect(refusal).toBeInstanceOf(DeadlineExceededError);
        expect((refusal as DeadlineExceededError).phase).toBe('before-call');
        // The next message on the queue is the one sent after: nothing reached the broker before it.
        channel.sendToQueue(q, Buffer.from('after'));
        expect((await nextOn(q)).content.toString()).toBe('after');
      } finally {
        withDeadline(channel, { serviceName: 'stock', logger: lines.logger });
      }
    });

    it('the broker drops a request nobody waited for in time: no consumer ever gets it', async () => {
      const q = await queue('broker-drops');
      inRequest(150, () => channel.sendToQueue(q, Buffer.from('stale'), { replyTo: 'r' }));
      channel.sendToQueue(q, Buffer.from('fresh'));
      // Both reached the queue (the broker handles a channel's frames in order), the stale one at its head.
      await channel.checkQueue(q);
      await expect.poll(async () => (await plain.checkQueue(q)).messageCount, { timeout: 10_000 }).toBe(1);
      expect((await nextOn(q)).content.toString()).toBe('fresh');
    });
  });

  describe('consuming', () => {
    it('the handler runs inside the budget the message carries, less the time it waited in the queue', async () => {
      const q = await queue('waited');
      const sentAt = Date.now();
      inRequest(3_000, () => channel.sendToQueue(q, Buffer.from('x'), { replyTo: 'r' }));
      // The message waits in the queue until a consumer comes.
      await sleep(600);
      const seen = deferred<{ remaining: number; trace: string | undefined; hop: string | undefined; at: number }>();
      const { consumerTag } = await channel.consume(q, (message) => {
        seen.resolve({
          remaining: remainingMs(),
          trace: currentContext()?.trace?.traceId,
          hop: currentContext()?.hop,
          at: Date.now(),
        });
        channel.ack(message as ConsumeMessage);
      });
      const { remaining, trace, hop, at } = await seen.promise;
      await channel.cancel(consumerTag);
      const waited = at - sentAt;
      expect(waited).toBeGreaterThanOrEqual(590);
      // 3,000 less what it waited (less the 10 ms the clocks may disagree by, given back).
      expect(remaining).toBeLessThanOrEqual(3_000 - waited + 20);
      expect(remaining).toBeGreaterThan(3_000 - waited - 500);
      expect(trace).toBe(TRACE.traceId);
      expect(hop).toBe('stock');
      await expect.poll(() => lines.of(q).length).toBe(1);
      expect(lines.of(q)[0]).toMatchObject({ level: 'info', msg: 'amqp message', outcome: 'ok', code: 'ok' });
      expect(lines.of(q)[0]?.waitedMs).toBeGreaterThanOrEqual(500);
    });

    it('a message whose budget is gone is not handled: acknowledged, counted and logged once', async () => {
      const q = await queue('expired');
      const dropped = droppedMessages();
      let handled = 0;
      const { consumerTag } = await channel.consume(q, (message) => {
        handled++;
        channel.ack(message as ConsumeMessage);
      });
      try {
        // As a publisher's would be after 1 s in a queue: the wall-clock deadline 700 ms ago.
        plain.sendToQueue(q, Buffer.from('gone'), {
          replyTo: 'r',
          headers: { 'x-request-deadline': '300', 'x-request-deadline-at': String(Date.now() - 700) },
        });
        // Below the consumer's minMs (10): not handled either.
        plain.sendToQueue(q, Buffer.from('too little'), { replyTo: 'r', headers: { 'x-request-deadline': '5' } });
        plain.sendToQueue(q, Buffer.from('fine'), { replyTo: 'r', headers: { 'x-request-deadline': '5000' } });
        await expect.poll(() => handled).toBe(1);
        await expect.poll(() => dropped.events.length).toBe(2);
        expect(dropped.events[0]).toMatchObject({ protocol: 'amqp', target: q, reason: 'expired', hop: 'stock' });
        expect(dropped.events[0]?.waitedMs).toBeGreaterThanOrEqual(300);
        expect(dropped.events[1]).toMatchObject({ reason: 'expired', budgetMs: 5 });
        const expired = lines.of(q).filter((line) => line.code === 'expired');
        expect(expired).toHaveLength(2);
        expect(expired[0]).toMatchObject({ level: 'warn', outcome: 'deadline_exceeded', exceededBy: 'stock' });
        // Acknowledged: nothing is left, nothing comes back.
        await expect.poll(async () => (await plain.checkQueue(q)).messageCount).toBe(0);
      } finally {
        dropped.stop();
        await channel.cancel(consumerTag);
      }
      const recovered = await plain.get(q);
      expect(recovered).toBe(false);
    });

    it('a handler that fails with a deadline error is reported once, never an unhandled rejection', async () => {
      const q = await queue('rejects');
      await expectProcessLives(async () => {
        const { consumerTag } = await channel.consume(q, async (message) => {
          channel.ack(message as ConsumeMessage);
          // What a handler that does not catch its cut query ends with.
          throw new DeadlineExceededError({ phase: 'during-call', target: 'stock-db', budgetMs: 50, elapsedMs: 51 });
        });
        plain.sendToQueue(q, Buffer.from('x'), { replyTo: 'r' });
        await expect.poll(() => lines.of(q).length).toBe(1);
        await channel.cancel(consumerTag);
      });
      expect(lines.of(q)[0]).toMatchObject({
        level: 'warn',
        outcome: 'deadline_exceeded',
        code: 'ERR_DEADLINE_EXCEEDED',
      });
    });

    it("expired: 'dead-letter' rejects it to the queue's dead-letter exchange instead", async () => {
      const dead = await queue('dead-letters');
      const q = await queue('dead-lettered', { deadLetterExchange: '', deadLetterRoutingKey: dead });
      const bounded = withDeadline(await connection.createChannel(), { serviceName: 'stock', expired: 'dead-letter' });
      let handled = 0;
      await bounded.consume(q, () => {
        handled++;
      });
      plain.sendToQueue(q, Buffer.from('gone'), {
        replyTo: 'r',
        headers: { 'x-request-deadline': '300', 'x-request-deadline-at': String(Date.now() - 700) },
      });
      const letter = await nextOn(dead);
      expect(letter.content.toString()).toBe('gone');
      expect(handled).toBe(0);
      await bounded.close();
    });

    it('clockSkewMs: false reads no wall clock: the budget starts when the message arrives', async () => {
      const q = await queue('no-wall-clock');
      const bounded = withDeadline(await connection.createChannel(), { serviceName: 'stock', clockSkewMs: false });
      const seen = deferred<number>();
      await bounded.consume(q, () => seen.resolve(remainingMs()), { noAck: true });
      plain.sendToQueue(q, Buffer.from('x'), {
        replyTo: 'r',
        headers: { 'x-request-deadline': '2000', 'x-request-deadline-at': String(Date.now() - 700) },
      });
      expect(await seen.promise).toBeGreaterThan(1_500);
      await bounded.close();
    });

    it('an event (no reply-to, no budget) runs without a deadline, keeping its trace', async () => {
      const q = await queue('event-consumed');
      const seen = deferred<{ remaining: number; trace: string | undefined }>();
      const { consumerTag } = await channel.consume(
        q,
        () => seen.resolve({ remaining: remainingMs(), trace: currentContext()?.trace?.traceId }),
        { noAck: true },
      );
      inRequest(500, () => channel.publish('', q, Buffer.from('event')));
      const { remaining, trace } = await seen.promise;
      await channel.cancel(consumerTag);
      expect(remaining).toBeGreaterThan(24 * 3_600_000);
      expect(trace).toBe(TRACE.traceId);
    });
  });

  describe('request/reply', () => {
    it('answers within the caller’s budget: the server’s handler sees what is left of it', async () => {
      const q = await queue('rpc');
      const { consumerTag } = await channel.consume(q, (message) => {
        const m = message as ConsumeMessage;
        const left = Math.round(remainingMs());
        channel.sendToQueue(m.properties.replyTo as string, Buffer.from(String(left)), {
          correlationId: m.properties.correlationId,
        });
        channel.ack(m);
      });
      try {
        const reply = await inRequest(2_000, () => request(channel, q, Buffer.from('how long?')));
        const left = Number(reply.content.toString());
        expect(left).toBeGreaterThan(1_000);
        expect(left).toBeLessThanOrEqual(2_000);
        expect(reply.properties.headers?.traceparent).toContain(TRACE.traceId);
        // Outside any context: no bound, as amqplib's own.
        const outside = await request(channel, q, Buffer.from('and now?'));
        expect(Number(outside.content.toString())).toBeGreaterThan(10_000);
      } finally {
        await channel.cancel(consumerTag);
      }
    });
  });

  it('request() over a reply queue of the app’s own: answered within the budget, a late reply dropped and counted', async () => {
    const q = await queue('named-rpc');
    const replies = queueName('named-replies');
    await channel.assertQueue(replies, { exclusive: true, autoDelete: true });
    const dropped = droppedMessages();
    // A server that knows nothing of deadlines: it answers 'slow' after 600 ms, anything else at once.
    const { consumerTag } = await plain.consume(
      q,
      (message) => {
        const m = message as ConsumeMessage;
        const reply = () =>
          plain.sendToQueue(String(m.properties.replyTo), Buffer.from('pong'), {
            correlationId: m.properties.correlationId,
          });
        if (m.content.toString() === 'slow') setTimeout(reply, 600);
        else reply();
      },
      { noAck: true },
    );
    try {
      const reply = await inRequest(2_000, () => request(channel, q, Buffer.from('ping'), { replyTo: replies }));
      expect(reply.content.toString()).toBe('pong');
      expect(reply.fields).toMatchObject({ routingKey: replies });
      const caught = await inRequest(200, () => request(channel, q, Buffer.from('slow'), { replyTo: replies })).catch(
        (error: unknown) => error,
      );
      expect(caught).toBeInstanceOf(DeadlineExceededError);
      await expect.poll(() => dropped.events.map((e) => e.reason), { timeout: 5_000 }).toEqual(['late-reply']);
      expect(dropped.events[0]).toMatchObject({ protocol: 'amqp', target: q, hop: 'gateway' });
    } finally {
      dropped.stop();
      await plain.cancel(consumerTag);
    }
  });

  it('a publisher in another language (librabbitmq’s amqp-publish, in C): its budget honoured, its request answered', async () => {
    const q = await queue('foreign');
    const replies = await queue('foreign-replies');
    const seen = deferred<{ remaining: number; trace: string | undefined }>();
    const { consumerTag } = await channel.consume(q, (message) => {
      const m = message as ConsumeMessage;
      seen.resolve({ remaining: remainingMs(), trace: currentContext()?.trace?.traceId });
      channel.sendToQueue(String(m.properties.replyTo), Buffer.from('answered'));
      channel.ack(m);
    });
    try {
      const publish = (...headers: string[]) =>
        run('amqp-publish', [
          '-u',
          RABBITMQ.url,
          '-r',
          q,
          '-t',
          replies,
          '-b',
          'x',
          ...headers.flatMap((h) => ['-H', h]),
        ]);
      // As a Go or C client writes them: capitalised names, text values.
      await publish('X-Request-Deadline: 700', `Traceparent: 00-${TRACE.traceId}-00f067aa0ba902b7-01`);
      const { remaining, trace } = await seen.promise;
      expect(remaining).toBeLessThanOrEqual(700);
      expect(remaining).toBeGreaterThan(300);
      expect(trace).toBe(TRACE.traceId);
      expect((await nextOn(replies)).content.toString()).toBe('answered');
      // Its deadline already past by its own wall clock: not handled, answered with the deadline answer.
      await publish('X-Request-Deadline: 300', `X-Request-Deadline-At: ${Date.now() - 700}`);
      const answer = await nextOn(replies);
      expect(answer.content.length).toBe(0);
      expect(answer.properties.headers?.['x-deadline-exceeded-by']).toBe('stock');
    } finally {
      await channel.cancel(consumerTag);
    }
  });

  it('withoutDeadline() puts the channel back as it was', async () => {
    const bounded = withDeadline(await connection.createChannel());
    const q = await queue('undone');
    withoutDeadline(bounded);
    inRequest(800, () => bounded.sendToQueue(q, Buffer.from('x'), { replyTo: 'r' }));
    const message = await nextOn(q);
    expect(message.properties.headers ?? {}).toEqual({});
    expect(Object.hasOwn(bounded, 'publish')).toBe(false);
    await bounded.close();
  });

  it('rejects what is not a channel, and bad options, naming them', () => {
    expect(() => withDeadline({} as never)).toThrow(/channel/);
    expect(() => withDeadline(plain, { expired: 'requeue' as never })).toThrow(/expired/);
    expect(() => withDeadline(plain, { clockSkewMs: -1 })).toThrow(/clockSkewMs/);
    expect(() => withDeadline(plain, { publish: { marginMs: Number.NaN } })).toThrow(/marginMs/);
    expect(Object.hasOwn(plain, 'publish')).toBe(false);
  });

  it('names its correlation ids itself unless the app gives one', async () => {
    const q = await queue('correlation');
    const { consumerTag } = await plain.consume(
      q,
      (message) => {
        const m = message as ConsumeMessage;
        plain.sendToQueue(m.properties.replyTo as string, Buffer.from(m.properties.correlationId ?? ''), {
          correlationId: m.properties.correlationId,
        });
      },
      { noAck: true },
    );
    const id = randomUUID();
    const reply = await request(channel, q, Buffer.from('x'), { correlationId: id });
    expect(reply.content.toString()).toBe(id);
    await plain.cancel(consumerTag);
  });
});
