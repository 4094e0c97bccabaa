/**
 * Nest microservices on the real brokers here (NATS, RabbitMQ, Redis), each a standalone microservice with the module,
 * called by a Nest client bounded by `withDeadline()` from a request's deadline context: the budget and the trace
 * travel in the message, the handler runs inside what is left (its PostgreSQL statement cancelled at its deadline), a
 * message with no time left is not sent, the caller stops waiting at its deadline, an event carries the trace but no
 * deadline, and what is logged is the library's one line, nothing at error level. The gRPC transport is in
 * grpc-transport.test.ts.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { currentContext, DeadlineExceededError, InvalidArgumentError, runWithContext, traceFrom } from '@deadline/core';
import { withDeadline as withPgDeadline } from '@deadline/pg';
import { headers as natsHeadersOf } from '@nats-io/transport-node';
import { Controller, type INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  type ClientOptions,
  ClientProxy,
  ClientProxyFactory,
  type ClientProxy as ClientProxyType,
  Ctx,
  EventPattern,
  MessagePattern,
  NatsRecordBuilder,
  Payload,
  RmqRecordBuilder,
  Transport,
} from '@nestjs/microservices';
import amqp from 'amqplib';
import pg from 'pg';
import { firstValueFrom } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NATS, POSTGRES, RABBITMQ, REDIS, requireService } from '../../../test/support/services.ts';
import { marker, ServerActivity } from '../../pg/test/support/activity.ts';
import type { LogLine } from '../../server/test/harness.ts';
import { Deadline, DeadlineModule } from '../src/index.ts';
import { withDeadline } from '../src/microservices/index.ts';
import { MemoryLogger } from './harness.ts';

/** pino's level numbers. */
const ERROR = 50;
const WARN = 40;

/** Patterns, subjects and queues unique to this run: the brokers are shared with other runs and files. */
const RUN = randomUUID().slice(0, 8);
const TRACE = traceFrom('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
/** NestJS 12's packets carry metadata (the Redis transport's only place for a budget); NestJS 11's do not. */
const PACKETS_CARRY_METADATA =
  typeof (ClientProxy.prototype as { setOnDispatchHook?: unknown }).setOnDispatchHook === 'function';

const available =
  (await requireService(POSTGRES)) &&
  (await requireService(NATS)) &&
  (await requireService(RABBITMQ)) &&
  (await requireService(REDIS));

let db: ReturnType<typeof withPgDeadline<pg.Pool>>;
const events: { budgetMs: number | undefined; traceId: string | undefined }[] = [];
const eventSeen: (() => void)[] = [];
let handled = 0;

interface Seen {
  budgetMs: number;
  remainingMs: number;
  hop: string | undefined;
  traceId: string | undefined;
}

function seen(): Seen {
  const context = currentContext();
  return {
    budgetMs: context?.deadline.budgetMs ?? Number.NaN,
    remainingMs: context?.remainingMs() ?? Number.NaN,
    hop: context?.hop,
    traceId: context?.trace?.traceId,
  };
}

@Controller()
class StockController {
  @MessagePattern(`${RUN}.seen`)
  seen(@Payload() _data: unknown, @Ctx() _context: unknown): Seen {
    handled++;
    return seen();
  }

  @MessagePattern(`${RUN}.sleep`)
  @Deadline({ maxMs: 300 })
  async sleep(@Payload() data: { marker: string }): Promise<string> {
    await db.query(`select pg_sleep(5) /* ${data.marker} */`);
    return 'slept';
  }

  @EventPattern(`${RUN}.changed`)
  changed(@Payload() _data: unknown): void {
    const context = currentContext();
    events.push({
      budgetMs: context?.deadline.isNone === false ? context.deadline.budgetMs : undefined,
      traceId: context?.trace?.traceId,
    });
    eventSeen.shift()?.();
  }
}

@Module({
  imports: [DeadlineModule.forRoot({ serviceName: 'stock', defaultMs: 10_000 })],
  controllers: [StockController],
})
class StockModule {}

type Broker = { name: string; transport: Transport; options: Record<string, unknown> };
const QUEUE = `deadline-nest-${RUN}`;
const BROKERS: Broker[] = [
  { name: 'NATS', transport: Transport.NATS, options: { servers: [NATS.url] } },
  {
    name: 'RabbitMQ',
    transport: Transport.RMQ,
    options: { urls: [RABBITMQ.url], queue: QUEUE, queueOptions: { durable: false, autoDelete: true } },
  },
  {
    name: 'Redis',
    transport: Transport.REDIS,
    options: { host: new URL(REDIS.url).hostname, port: Number(new URL(REDIS.url).port) },
  },
];

/** `data` as a message with `headers` of the publisher's own, as the broker's record carries them. */
function withHeaders(broker: Broker, headers: Record<string, unknown>): unknown {
  if (broker.transport === Transport.RMQ) return new RmqRecordBuilder(data()).setOptions({ headers } as never).build();
  const natsHeaders = natsHeadersOf();
  for (const [name, value] of Object.entries(headers)) natsHeaders.set(name, String(value));
  return new NatsRecordBuilder(data()).setHeaders(natsHeaders).build();
}

const data = () => ({ sku: 'A1' });

/** Runs `call` in a request's deadline context of `budgetMs` (the caller's hop `gateway`, with the test's trace). */
function inRequest<T>(budgetMs: number, call: () => Promise<T>): Promise<T> {
  return runWithContext({ deadline: budgetMs, hop: 'gateway', trace: TRACE }, call);
}

describe.runIf(available)('nestjs microservices: the budget travels in the message', () => {
  let activity: ServerActivity;
  beforeAll(async () => {
    db = withPgDeadline(new pg.Pool({ connectionString: POSTGRES.url, max: 3 }), { name: 'stock-db' });
    activity = await ServerActivity.open();
  });
  afterAll(async () => {
    await activity?.end();
    await db?.end();
  });

  for (const broker of BROKERS) {
    describe(broker.name, () => {
      const logs: LogLine[] = [];
      let server: INestMicroservice;
      let client: ClientProxyType;
      const errorLines = () => logs.filter((line) => line.level >= ERROR);

      beforeAll(async () => {
        server = await NestFactory.createMicroservice(StockModule, {
          transport: broker.transport,
          options: broker.options,
          logger: new MemoryLogger(logs),
        } as never);
        await server.listen();
        client = withDeadline(
          ClientProxyFactory.create({ transport: broker.transport, options: broker.options } as ClientOptions),
          { marginMs: 10 },
        );
        await client.connect();
      });
      afterAll(async () => {
        await client?.close();
        await server?.close();
      });

      it('send() carries the remaining budget and the trace; the handler runs inside them', async () => {
        const reply = await inRequest(2_000, () => firstValueFrom(client.send<Seen>(`${RUN}.seen`, { sku: 'A1' })));
        expect(reply.hop).toBe('stock');
        if (broker.transport === Transport.REDIS && !PACKETS_CARRY_METADATA) {
          // NestJS 11's Redis packets have no place for it: the module's defaultMs, and a trace of the handler's own.
          expect(reply.budgetMs).toBe(10_000);
          return;
        }
        expect(reply.budgetMs).toBeLessThanOrEqual(2_000 - 10);
        expect(reply.budgetMs).toBeGreaterThan(1_000);
        expect(reply.remainingMs).toBeLessThanOrEqual(reply.budgetMs);
        expect(reply.traceId).toBe(TRACE.traceId);
      });

      it('outside any request: no budget sent, the module’s defaultMs', async () => {
        const reply = await firstValueFrom(client.send<Seen>(`${RUN}.seen`, {}));
        expect(reply.budgetMs).toBe(10_000);
      });

      it('a handler past its @Deadline(): its statement cancelled, the caller told it was the handler’s deadline', async () => {
        if (broker.transport === Transport.REDIS && !PACKETS_CARRY_METADATA) return;
        const statement = marker();
        const started = performance.now();
        const failure = await inRequest(5_000, () =>
          firstValueFrom(client.send(`${RUN}.sleep`, { marker: statement })).catch((error: unknown) => error),
        );
        const failedAt = performance.now();
        expect(failure).toBeInstanceOf(DeadlineExceededError);
        expect((failure as DeadlineExceededError).whose).toBe('downstream:stock');
        expect(failedAt - started).toBeGreaterThanOrEqual(290);
        expect(failedAt - started).toBeLessThan(2_500);
        const goneAt = await activity.goneAt(statement);
        expect(goneAt - started).toBeLessThan(2_500);
        const line = logs.find((l) => l.method === `${RUN}.sleep` && l.outcome === 'deadline_exceeded');
        expect(line).toMatchObject({ level: WARN, hop: 'stock', exceededBy: 'stock' });
        expect(errorLines()).toEqual([]);
      });

      it('too little time left: nothing sent, a DeadlineExceededError at once', async () => {
        const before = handled;
        const bounded = withDeadline(client, { marginMs: 10, minMs: 500 });
        const refusal = await inRequest(200, () =>
          firstValueFrom(bounded.send(`${RUN}.seen`, {})).catch((error: unknown) => error),
        );
        withDeadline(client, { marginMs: 10 });
        expect(refusal).toBeInstanceOf(DeadlineExceededError);
        expect((refusal as DeadlineExceededError).phase).toBe('before-call');
        // The next message is the first the handler sees since.
        await firstValueFrom(client.send(`${RUN}.seen`, {}));
        expect(handled).toBe(before + 1);
      });

      it('no reply comes: the caller stops waiting at its deadline', async () => {
        const started = performance.now();
        const failure = await inRequest(300, () =>
          firstValueFrom(client.send(`${RUN}.nobody-answers`, {})).catch((error: unknown) => error),
        );
        const elapsed = performance.now() - started;
        if (broker.transport === Transport.REDIS) {
          // Nobody subscribes to the channel: nothing answers, and the caller's own deadline ends the wait.
          expect(failure).toBeInstanceOf(DeadlineExceededError);
          expect((failure as DeadlineExceededError).whose).toBe('local');
          expect((failure as DeadlineExceededError).hop).toBe('gateway');
          expect(elapsed).toBeGreaterThanOrEqual(280);
          expect(elapsed).toBeLessThan(2_000);
        } else {
          // NATS says at once that no one subscribes; the RabbitMQ server, that no handler matches: the app's error.
          expect(failure).not.toBeInstanceOf(DeadlineExceededError);
        }
      });

      // Redis has no headers: a publisher of its own has nowhere to put a budget but Nest's packet metadata.
      if (broker.transport !== Transport.REDIS)
        it('a publisher of its own: its budget header honoured, one below minMs refused unrun, a hostile one ignored', async () => {
          const plain = ClientProxyFactory.create({
            transport: broker.transport,
            options: broker.options,
          } as ClientOptions);
          await plain.connect();
          const sending = (value: unknown) =>
            firstValueFrom(plain.send<Seen>(`${RUN}.seen`, withHeaders(broker, { 'X-Request-Deadline': value }))).catch(
              (error: unknown) => error,
            );
          try {
            expect(((await sending('250')) as Seen).budgetMs).toBe(250);
            // As if it had waited ~400 ms in the broker: its wall-clock deadline says so (less the 10 ms allowance).
            const waited = (await firstValueFrom(
              plain.send<Seen>(
                `${RUN}.seen`,
                withHeaders(broker, {
                  'X-Request-Deadline': '1000',
                  'X-Request-Deadline-At': String(Date.now() + 600),
                }),
              ),
            )) as Seen;
            expect(waited.budgetMs).toBeGreaterThan(550);
            expect(waited.budgetMs).toBeLessThanOrEqual(620);
            // More than defaultMs from a caller not trusted (no trustMessage): the default.
            expect(((await sending('99999')) as Seen).budgetMs).toBe(10_000);
            // 0 is no budget (several systems read it as "no timeout"): ignored, as HTTP's.
            for (const hostile of ['0', 'garbage', '-5', '1e309', ' ', 'x'.repeat(10_000)]) {
              expect(((await sending(hostile)) as Seen).budgetMs).toBe(10_000);
            }
            if (broker.transport === Transport.RMQ) {
              // AMQP headers are typed: a number is read, bytes are not.
              expect(((await sending(250)) as Seen).budgetMs).toBe(250);
              expect(((await sending(Buffer.from('250'))) as Seen).budgetMs).toBe(10_000);
            }
            const before = handled;
            // Below the module's minMs (10): refused, the handler not run.
            const refusal = await sending('5');
            expect(refusal).toMatchObject({ status: 'error', code: 'ERR_DEADLINE_EXCEEDED', exceededBy: 'stock' });
            expect(handled).toBe(before);
            expect(errorLines()).toEqual([]);
          } finally {
            await plain.close();
          }
        });

      it('emit() carries the trace and no deadline: the event’s handler is not bounded by the request', async () => {
        events.length = 0;
        const handledEvent = new Promise<void>((resolve) => eventSeen.push(resolve));
        await inRequest(2_000, () => firstValueFrom(client.emit(`${RUN}.changed`, { sku: 'A1' })));
        await handledEvent;
        expect(events).toHaveLength(1);
        // The event runs with no deadline of the request's (24.8 days: the most a timer takes).
        expect(events[0]?.budgetMs ?? Number.POSITIVE_INFINITY).toBeGreaterThan(86_400_000);
        if (broker.transport !== Transport.REDIS || PACKETS_CARRY_METADATA)
          expect(events[0]?.traceId).toBe(TRACE.traceId);
      });
    });
  }

  it('RabbitMQ: a request nobody consumes expires in the broker at the caller’s deadline', async () => {
    const idle = `deadline-nest-idle-${RUN}`;
    const connection = await amqp.connect(RABBITMQ.url);
    const channel = await connection.createChannel();
    try {
      await channel.assertQueue(idle, { durable: false, autoDelete: false });
      const client = withDeadline(
        ClientProxyFactory.create({
          transport: Transport.RMQ,
          options: { urls: [RABBITMQ.url], queue: idle, queueOptions: { durable: false } },
        }),
      );
      await client.connect();
      const failure = await inRequest(300, () =>
        firstValueFrom(client.send(`${RUN}.seen`, {})).catch((error: unknown) => error),
      );
      expect(failure).toBeInstanceOf(DeadlineExceededError);
      // The message's expiration is what was left of the budget when it was sent, a moment after the call started:
      // the broker drops it, unread, a few ms after the caller gave up. Watched (never read) until it is gone.
      const until = performance.now() + 5_000;
      let waiting = (await channel.checkQueue(idle)).messageCount;
      while (waiting > 0 && performance.now() < until) waiting = (await channel.checkQueue(idle)).messageCount;
      expect(waiting).toBe(0);
      await client.close();
    } finally {
      await channel.deleteQueue(idle);
      await connection.close();
    }
  });

  it('a hybrid app (HTTP and a microservice) whose microservice inherits the app’s config: its handlers bounded too', async () => {
    const app = await NestFactory.create(StockModule, { logger: false });
    // Without inheritAppConfig a hybrid's microservice gets none of the app's global enhancers, the module's included.
    app.connectMicroservice({ transport: Transport.NATS, options: BROKERS[0]?.options }, { inheritAppConfig: true });
    await app.startAllMicroservices();
    await app.init();
    const client = withDeadline(
      ClientProxyFactory.create({ transport: Transport.NATS, options: BROKERS[0]?.options } as ClientOptions),
    );
    try {
      const reply = await inRequest(2_000, () => firstValueFrom(client.send<Seen>(`${RUN}.seen`, {})));
      expect(reply.budgetMs).toBeLessThanOrEqual(2_000);
      expect(reply.budgetMs).toBeGreaterThan(1_000);
    } finally {
      await client.close();
      await app.close();
    }
  });

  it('withDeadline() refuses what is not a message client, naming what it takes', () => {
    expect(() => withDeadline({} as ClientProxyType)).toThrow(InvalidArgumentError);
  });
});
