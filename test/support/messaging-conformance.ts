/**
 * The behaviour both broker adapters (@deadline/amqp over RabbitMQ, @deadline/nats over NATS) must show against the
 * real servers: what a request and an event carry, a request not sent without time, a consumer's handler inside what
 * is left of the publisher's budget less the time the message waited, a message that arrives with no time left not
 * handled but counted, logged and answered, the deadline answer when the consumer's deadline fires first, a handler's
 * database work cancelled at the deadline and its late answer held back, a late reply dropped and counted, hostile
 * headers read as none. Each adapter's conformance file runs it with a driver of its own, and keeps beside it what is
 * its broker's own (RabbitMQ's expiration and dead-lettering, NATS's inbox, JetStream).
 */
import diagnostics from 'node:diagnostics_channel';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  currentContext,
  DeadlineExceededError,
  DiagnosticsChannel,
  type MessageDroppedMessage,
  remainingMs,
  runWithContext,
  runWithDeadline,
  traceFrom,
} from '@deadline/core';
import { withDeadline as withPgDeadline } from '@deadline/pg';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { marker, ServerActivity } from '../../packages/pg/test/support/activity.ts';
import { POSTGRES } from './services.ts';

export const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const TRACEPARENT = `00-${TRACE_ID}-00f067aa0ba902b7-01`;

/** A message as the suite's handlers see it. */
export interface Received {
  text: string;
  /** Answers it, through the bounded channel or connection. */
  respond(text: string): void;
}

/** What a plain client saw of a reply: its text and headers (names lower case). */
export interface RawReply {
  text: string;
  headers: Record<string, string>;
}

/** The consuming service's options the suite uses; each driver makes its adapter's from them. */
export interface ServeOptions {
  serviceName: string;
  defaultMs?: number;
  minMs?: number;
  logger?: { info(line: object, message: string): void; warn(line: object, message: string): void };
}

/** One broker adapter, as the suite drives it. */
export interface MessagingDriver {
  /** As its events and lines name it: `amqp`, `nats`. */
  protocol: string;
  /** A destination (queue, subject) of this test's own, ready to publish to. */
  destination(name: string): Promise<string>;
  /** A consuming service on `destination`, bounded by the adapter; `handler` runs for each message. Returns its stop. */
  serve(
    destination: string,
    options: ServeOptions,
    handler: (message: Received) => unknown,
  ): Promise<() => Promise<void>>;
  /** A request through the adapter, in the current context; resolves with the reply's text. */
  request(destination: string, text: string): Promise<string>;
  /** An event through the adapter (nobody answers it), in the current context. */
  publishEvent(destination: string, text: string): Promise<void>;
  /** A request by a plain client (no library), with `headers`; resolves with the reply it got. */
  rawRequest(destination: string, headers: Record<string, string>): Promise<RawReply>;
  /** A plain consumer of the next message on `destination`, ready when this resolves: its headers, when it comes. */
  rawNext(destination: string): Promise<{ headers: Promise<Record<string, string>> }>;
  /** A plain responder that answers each request after `delayMs`. Returns its stop. */
  rawResponder(destination: string, delayMs: number): Promise<() => Promise<void>>;
}

function inRequest<T>(budgetMs: number, fn: () => T): T {
  return runWithContext({ deadline: budgetMs, hop: 'gateway', trace: traceFrom(TRACEPARENT), root: true }, fn);
}

/** The dropped-message events published while the suite runs. */
const dropped: MessageDroppedMessage[] = [];
const onDropped = (message: unknown) => dropped.push(message as MessageDroppedMessage);
const droppedFor = (target: string, reason: MessageDroppedMessage['reason']) =>
  dropped.filter((event) => event.target === target && event.reason === reason);

/** Lines a service's logger wrote, by their `method` (the destination). */
class Lines {
  readonly lines: (Record<string, unknown> & { level: string; msg: string })[] = [];
  readonly logger = {
    info: (line: object, msg: string) => this.lines.push({ ...line, level: 'info', msg }),
    warn: (line: object, msg: string) => this.lines.push({ ...line, level: 'warn', msg }),
  };
  of(destination: string) {
    return this.lines.filter((line) => line.method === destination);
  }
}

/** Runs the suite against `driver`, made by `open` (and closed by what it returns). */
export function messagingConformance(
  name: string,
  open: () => Promise<{ driver: MessagingDriver; close(): Promise<void> }>,
): void {
  describe(`${name}: messaging conformance`, () => {
    let driver: MessagingDriver;
    let close: () => Promise<void>;
    const lines = new Lines();

    beforeAll(async () => {
      diagnostics.subscribe(DiagnosticsChannel.MessageDropped, onDropped);
      ({ driver, close } = await open());
    });
    afterAll(async () => {
      diagnostics.unsubscribe(DiagnosticsChannel.MessageDropped, onDropped);
      await close?.();
    });

    it('a request carries the remaining budget, its wall-clock deadline and the trace; an event the trace only', async () => {
      const d = await driver.destination('carries');
      const next = (await driver.rawNext(d)).headers;
      const before = Date.now();
      // Nobody answers: the request ends at its deadline, once it has been sent.
      const sent = inRequest(800, () => driver.request(d, 'x')).catch((error: unknown) => error);
      const headers = await next;
      const budget = Number(headers['x-request-deadline']);
      expect(budget).toBeGreaterThan(400);
      expect(budget).toBeLessThanOrEqual(800);
      const at = Number(headers['x-request-deadline-at']);
      expect(at).toBeGreaterThanOrEqual(before + budget - 50);
      expect(at).toBeLessThanOrEqual(Date.now() + budget);
      expect(headers.traceparent).toContain(TRACE_ID);
      expect(await sent).toBeInstanceOf(DeadlineExceededError);

      const nextEvent = (await driver.rawNext(d)).headers;
      await inRequest(800, () => driver.publishEvent(d, 'event'));
      const event = await nextEvent;
      expect(event.traceparent).toContain(TRACE_ID);
      expect(event['x-request-deadline']).toBeUndefined();
      expect(event['x-request-deadline-at']).toBeUndefined();
    });

    it('with too little time left the request is not sent: a DeadlineExceededError at once', async () => {
      const d = await driver.destination('refused');
      const next = (await driver.rawNext(d)).headers;
      const refusal = await runWithDeadline(0.5, () => driver.request(d, 'refused')).catch((error: unknown) => error);
      expect(refusal).toBeInstanceOf(DeadlineExceededError);
      expect((refusal as DeadlineExceededError).phase).toBe('before-call');
      // The next message there is the one sent after: the refused one never reached the broker.
      await inRequest(800, () => driver.publishEvent(d, 'after'));
      expect((await next).traceparent).toContain(TRACE_ID);
      expect((await next)['x-request-deadline']).toBeUndefined();
    });

    it('the handler runs in what is left of the budget, less the time the message waited; the trace goes on', async () => {
      const d = await driver.destination('waited');
      const seen: { remaining: number; trace: string | undefined; hop: string | undefined }[] = [];
      const stop = await driver.serve(d, { serviceName: 'stock', logger: lines.logger }, (message) => {
        seen.push({ remaining: remainingMs(), trace: currentContext()?.trace?.traceId, hop: currentContext()?.hop });
        message.respond('ok');
      });
      try {
        // Sent with 1,000 ms of which its wall clock says 600 are left: it waited 400 (390 for sure).
        const reply = await driver.rawRequest(d, {
          'x-request-deadline': '1000',
          'x-request-deadline-at': String(Date.now() + 600),
          traceparent: TRACEPARENT,
        });
        expect(reply.text).toBe('ok');
        expect(seen[0]?.remaining).toBeLessThanOrEqual(610);
        expect(seen[0]?.remaining).toBeGreaterThan(300);
        expect(seen[0]?.trace).toBe(TRACE_ID);
        expect(seen[0]?.hop).toBe('stock');
        await expect.poll(() => lines.of(d).length).toBe(1);
        expect(lines.of(d)[0]).toMatchObject({ level: 'info', msg: `${driver.protocol} message`, outcome: 'ok' });
        expect(lines.of(d)[0]?.waitedMs).toBeGreaterThanOrEqual(380);
      } finally {
        await stop();
      }
    });

    it('a message with no time left is not handled: counted, logged once, answered with the deadline answer', async () => {
      const d = await driver.destination('expired');
      let handled = 0;
      const stop = await driver.serve(d, { serviceName: 'stock', logger: lines.logger }, (message) => {
        handled++;
        message.respond('ok');
      });
      try {
        // As a publisher's would be after 1 s in the queue: its wall-clock deadline 700 ms ago.
        const reply = await driver.rawRequest(d, {
          'x-request-deadline': '300',
          'x-request-deadline-at': String(Date.now() - 700),
        });
        expect(reply.text).toBe('');
        expect(reply.headers['x-deadline-exceeded-by']).toBe('stock');
        expect(handled).toBe(0);
        await expect.poll(() => droppedFor(d, 'expired').length).toBe(1);
        expect(droppedFor(d, 'expired')[0]).toMatchObject({ protocol: driver.protocol, hop: 'stock', budgetMs: 0 });
        expect(droppedFor(d, 'expired')[0]?.waitedMs).toBeGreaterThanOrEqual(300);
        await expect.poll(() => lines.of(d).length).toBe(1);
        expect(lines.of(d)[0]).toMatchObject({ level: 'warn', code: 'expired', outcome: 'deadline_exceeded' });
        // Below the service's minMs: the same.
        const little = await driver.rawRequest(d, { 'x-request-deadline': '5' });
        expect(little.headers['x-deadline-exceeded-by']).toBe('stock');
        expect(handled).toBe(0);
      } finally {
        await stop();
      }
    });

    it('the consumer’s own deadline fires first: the caller gets the deadline answer naming it, at once', async () => {
      const d = await driver.destination('shorter');
      // An untrusted publisher may only shorten the service's default: 300 ms, whatever it asks.
      const stop = await driver.serve(d, { serviceName: 'pricing', defaultMs: 300 }, async (message) => {
        await sleep(2_000);
        message.respond('too late');
      });
      try {
        const started = Date.now();
        const caught = await inRequest(5_000, () => driver.request(d, 'x')).catch((error: unknown) => error);
        const elapsed = Date.now() - started;
        expect(caught).toBeInstanceOf(DeadlineExceededError);
        expect((caught as DeadlineExceededError).whose).toBe('downstream:pricing');
        expect(elapsed).toBeGreaterThanOrEqual(280);
        expect(elapsed).toBeLessThan(1_900);
      } finally {
        await stop();
      }
    });

    it('at the deadline the handler’s database work is cancelled on the server, and its late answer is not sent', async () => {
      const d = await driver.destination('cut');
      const activity = await ServerActivity.open();
      const db = withPgDeadline(new pg.Pool({ connectionString: POSTGRES.url, max: 2 }), { name: 'stock-db' });
      const statement = marker();
      const stop = await driver.serve(d, { serviceName: 'stock', logger: lines.logger }, async (message) => {
        try {
          await db.query(`SELECT pg_sleep(5) /* ${statement} */`);
          message.respond('done');
        } catch {
          message.respond('failed, late');
        }
      });
      try {
        const started = Date.now();
        const caught = await inRequest(400, () => driver.request(d, 'x')).catch((error: unknown) => error);
        expect(caught).toBeInstanceOf(DeadlineExceededError);
        // The caller's own deadline, or the service's answer naming it: the same instant.
        expect(['local', 'downstream:stock']).toContain((caught as DeadlineExceededError).whose);
        expect(Date.now() - started).toBeGreaterThanOrEqual(380);
        expect(Date.now() - started).toBeLessThan(2_500);
        expect((await activity.goneAt(statement)) - started).toBeLessThan(2_500);
        await expect.poll(() => droppedFor(d, 'late-answer').length).toBe(1);
        await expect.poll(() => lines.of(d).length).toBe(1);
        expect(lines.of(d)[0]).toMatchObject({ level: 'warn', outcome: 'deadline_exceeded', exceededBy: 'stock' });
      } finally {
        await stop();
        await db.end();
        await activity.end();
      }
    });

    it('a reply after the caller gave up is dropped and counted', async () => {
      const d = await driver.destination('late-reply');
      const stop = await driver.rawResponder(d, 600);
      try {
        const caught = await inRequest(200, () => driver.request(d, 'x')).catch((error: unknown) => error);
        expect(caught).toBeInstanceOf(DeadlineExceededError);
        expect((caught as DeadlineExceededError).whose).toBe('local');
        await expect.poll(() => droppedFor(d, 'late-reply').length, { timeout: 5_000 }).toBe(1);
        expect(droppedFor(d, 'late-reply')[0]).toMatchObject({ protocol: driver.protocol, hop: 'gateway' });
      } finally {
        await stop();
      }
    });

    it('hostile budget headers are no budget: the default, and the consumer goes on', async () => {
      const d = await driver.destination('hostile');
      const budgets: number[] = [];
      const stop = await driver.serve(d, { serviceName: 'stock', defaultMs: 5_000 }, (message) => {
        budgets.push(remainingMs());
        message.respond('ok');
      });
      try {
        const hostile = ['garbage', '0', '-5', '1e309', 'x'.repeat(5_000), '99999999999', ' ', '25 0', '0x10'];
        for (const value of hostile) {
          const reply = await driver.rawRequest(d, { 'x-request-deadline': value, 'x-request-deadline-at': value });
          expect(reply.text).toBe('ok');
        }
        expect(budgets).toHaveLength(hostile.length);
        for (const budget of budgets) expect(budget).toBeGreaterThan(3_000);
      } finally {
        await stop();
      }
    });
  });
}
