/**
 * Whatever a message's headers hold — they come off the wire, from any publisher — a consumer's handler runs with a
 * sane budget or the message is dropped as expired; nothing throws. Fuzzed through the path every delivery takes,
 * then a sample of hostile tables over the real RabbitMQ (which types its tables: numbers, bytes, arrays, nested
 * tables, booleans, null).
 */
import { remainingMs } from '@deadline/core';
import amqp, { type ChannelModel, type ConsumeMessage } from 'amqplib';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RABBITMQ, requireService } from '../../../test/support/services.ts';
import { BAD_BUDGET_VALUES } from '../../core/test/fixtures/bad-budget-values.ts';
import { Delivery } from '../src/delivery.ts';
import { type AmqpMessage, withDeadline } from '../src/index.ts';
import { resolveAmqpOptions } from '../src/options.ts';
import { queueName } from './support.ts';

const DEFAULT_MS = 5_000;
const options = resolveAmqpOptions({ serviceName: 'stock', defaultMs: DEFAULT_MS, maxMs: 10_000 });
const NAMES = [
  'x-request-deadline',
  'X-Request-Deadline',
  'x-request-deadline-at',
  'grpc-timeout',
  'connect-timeout-ms',
];

const value = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.stringMatching(/^ ?-?\d{0,17}(\.\d{0,3})?(e\d{1,3})?[HMSmun]? ?$/),
  fc.double(),
  fc.integer(),
  fc.constantFrom(...BAD_BUDGET_VALUES),
  fc.anything({ withNullPrototype: true, withBigInt: true, maxDepth: 2 }),
);
const table = fc.oneof(
  fc.dictionary(fc.constantFrom(...NAMES), value),
  fc.dictionary(fc.string(), value),
  fc.anything({ maxDepth: 2 }),
);

function message(headers: unknown, replyTo: unknown): AmqpMessage {
  return {
    content: Buffer.alloc(0),
    fields: { deliveryTag: 1 },
    properties: { headers: headers as Record<string, unknown>, replyTo: replyTo as string },
  };
}

describe('hostile headers', () => {
  it('never throw; the budget is a number from 0 to the most it may be', () => {
    fc.assert(
      fc.property(table, fc.oneof(fc.constant('reply'), fc.anything()), (headers, replyTo) => {
        const delivery = new Delivery(message(headers, replyTo), 'q', options);
        const { budgetMs, waitedMs } = delivery.incoming;
        delivery.finish();
        const most = delivery.replyTo === undefined ? 2 ** 31 - 1 : DEFAULT_MS;
        return budgetMs >= 0 && budgetMs <= most && waitedMs >= 0 && Number.isFinite(waitedMs);
      }),
      { numRuns: 20_000 },
    );
  });
});

const available = await requireService(RABBITMQ);

describe.runIf(available)('hostile headers over RabbitMQ', () => {
  let connection: ChannelModel;
  beforeAll(async () => {
    connection = await amqp.connect(RABBITMQ.url);
  });
  afterAll(async () => {
    await connection?.close();
  });

  it('a consumer handles each with the default budget; the channel stays open', async () => {
    const q = queueName('hostile');
    const publisher = await connection.createChannel();
    await publisher.assertQueue(q, { durable: false, autoDelete: true });
    const consumer = withDeadline(await connection.createChannel(), { serviceName: 'stock', defaultMs: DEFAULT_MS });
    const budgets: number[] = [];
    await consumer.consume(q, (m) => {
      budgets.push(remainingMs());
      consumer.ack(m as ConsumeMessage);
    });
    const hostile: Record<string, unknown>[] = [
      { 'x-request-deadline': 'garbage' },
      { 'x-request-deadline': '0' },
      { 'x-request-deadline': '-5' },
      { 'x-request-deadline': '1e309' },
      { 'x-request-deadline': 'x'.repeat(10_000) },
      { 'x-request-deadline': Buffer.from('250') },
      { 'x-request-deadline': ['250', '300'] },
      { 'x-request-deadline': { nested: '250' } },
      { 'x-request-deadline': true },
      { 'x-request-deadline': null },
      { 'x-request-deadline': 1.5e300 },
      { 'x-request-deadline': '99999999999' },
      { 'x-request-deadline': '3000', 'x-request-deadline-at': 'yesterday' },
      { 'x-request-deadline': '3000', 'x-request-deadline-at': '99999999999999999999' },
      { 'x-request-deadline': '3000', 'x-request-deadline-at': -1 },
      { 'grpc-timeout': '99999999H' },
      { traceparent: 'not a trace' },
    ];
    for (const headers of hostile) publisher.sendToQueue(q, Buffer.from('x'), { replyTo: 'r', headers });
    await expect.poll(() => budgets.length, { timeout: 10_000 }).toBe(hostile.length);
    // The default for a budget that says nothing; a valid one (3,000 ms) stands beside a wall clock that says nothing.
    expect(budgets.map((budget) => (budget > 3_000 ? 'default' : budget > 2_000 ? 'own' : budget))).toEqual(
      hostile.map((headers) => (headers['x-request-deadline'] === '3000' ? 'own' : 'default')),
    );
    // The channel is still usable.
    await consumer.checkQueue(q);
    await consumer.close();
    await publisher.close();
  });
});
