/**
 * The consuming service of the broker overload benchmark, in a process of its own: `node
 * dist/overload/broker/broker-consumer.js '<ConsumerConfig as JSON>'`, with an IPC channel. It consumes the request
 * queue with a prefetch, runs one `pg_sleep(workMs)` per message on a pool of `poolSize` connections (the bottleneck),
 * and answers on the message's `replyTo`. `library`: the channel bounded by `@deadline/amqp` and the pool by
 * `@deadline/pg`, as a service adopting the library would; `plain`: amqplib and pg as they are.
 *
 * Every stock statement is timed where the driver sends it and hears back (for `pg_sleep`, the time a backend was busy
 * on it, cancellation included), tagged with its request's id, which the message's body is.
 */
import { subscribe } from 'node:diagnostics_channel';
import { withDeadline } from '@deadline/amqp';
import { DiagnosticsChannel, type MessageDroppedMessage } from '@deadline/core';
import { withDeadline as withPgDeadline } from '@deadline/pg';
import amqp, { type ConsumeMessage } from 'amqplib';
import pg from 'pg';
import {
  type BrokerStatement,
  type ConsumerConfig,
  type ConsumerMessage,
  now,
  type RunnerMessage,
} from './broker-protocol.js';

const config = JSON.parse(process.argv[2] ?? '{}') as ConsumerConfig;
const send = (message: ConsumerMessage) => process.send?.(message);

let statements: BrokerStatement[] = [];
let expired = 0;
let lateAnswers = 0;
subscribe(DiagnosticsChannel.MessageDropped, (message) => {
  const { reason } = message as MessageDroppedMessage;
  if (reason === 'expired') expired++;
  else if (reason === 'late-answer') lateAnswers++;
});

/** A pg Client that times each stock statement (its second parameter is the request id) from send to answer. */
class TimedClient extends pg.Client {}
const query = pg.Client.prototype.query as (this: pg.Client, ...args: unknown[]) => unknown;
Object.defineProperty(TimedClient.prototype, 'query', {
  value: function timedQuery(this: pg.Client, ...args: unknown[]): unknown {
    const values = args[1];
    const rid = Array.isArray(values) && typeof values[1] === 'number' ? values[1] : undefined;
    if (rid === undefined) return query.apply(this, args);
    const record: BrokerStatement = [rid, now(), 0];
    const done = () => {
      record[2] = now();
      statements.push(record);
    };
    // pg's own pool.query() passes a callback; @deadline/pg's path takes the promise.
    const callback = args[2];
    if (typeof callback === 'function') {
      return query.call(this, args[0], values, (...results: unknown[]) => {
        done();
        (callback as (...results: unknown[]) => void)(...results);
      });
    }
    const result = query.apply(this, args) as Promise<unknown>;
    result.then(done, done);
    return result;
  },
});

const SLEEP = 'SELECT pg_sleep($1::float8 / 1000), $2::int AS rid';

async function main(): Promise<void> {
  const pool = new pg.Pool({ connectionString: config.postgresUrl, max: config.poolSize, Client: TimedClient });
  pool.on('error', () => {});
  const connection = await amqp.connect(config.amqpUrl);
  const raw = await connection.createChannel();
  await raw.prefetch(config.prefetch);
  const library = config.variant === 'library';
  // A message with less left than its statement takes is not started (minMs): it could only be cut.
  const channel = library ? withDeadline(raw, { serviceName: 'worker', minMs: config.workMs }) : raw;
  const db: { query(text: string, values: unknown[]): Promise<unknown> } = library
    ? withPgDeadline(pool, { name: 'stock-db' })
    : pool;
  await channel.consume(config.queue, async (message: ConsumeMessage | null) => {
    if (message === null) return;
    const rid = Number(message.content.toString());
    try {
      await db.query(SLEEP, [config.workMs, rid]);
      channel.sendToQueue(String(message.properties.replyTo), Buffer.from('ok'), {
        correlationId: message.properties.correlationId,
      });
    } catch {
      // Cut at its deadline (library), or the database failed: nothing to answer.
    }
    channel.ack(message);
  });
  process.on('message', (message: RunnerMessage) => {
    if (message.type !== 'collect') return;
    const usage = process.cpuUsage();
    send({ type: 'collected', statements, expired, lateAnswers, cpuMicros: usage.user + usage.system });
    statements = [];
  });
  send({ type: 'ready' });
}

main().catch((error: unknown) => {
  send({ type: 'failed', reason: error instanceof Error ? error.message : String(error) });
  process.exit(1);
});
