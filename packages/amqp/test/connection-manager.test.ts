/**
 * amqp-connection-manager's `ChannelWrapper` bounded, on the real RabbitMQ — and what happens when the broker drops
 * the connection under load, as it does when it restarts (`connection.close` 320 CONNECTION_FORCED, sent here with
 * `rabbitmqctl close_connection` to this file's connection alone; the broker is shared): nothing reaches the
 * process uncaught, a request in flight ends at its deadline, every message the broker confirmed is handled, the
 * consumers come back, and requests work again.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { promisify } from 'node:util';
import { currentContext, DeadlineExceededError, remainingMs, runWithContext, traceFrom } from '@deadline/core';
import amqpManager, { type AmqpConnectionManager, type ChannelWrapper } from 'amqp-connection-manager';
import type { ConfirmChannel, ConsumeMessage } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProcessLives } from '../../../test/support/process-watch.ts';
import { RABBITMQ, requireService } from '../../../test/support/services.ts';
import { request, withDeadline } from '../src/index.ts';
import { boundedWrapper, deferred, droppedMessages, queueName } from './support.ts';

const run = promisify(execFile);
const TRACE = traceFrom('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
const available = await requireService(RABBITMQ);
/** This file's connection, as the broker lists it. */
const CONNECTION_NAME = `deadline-amqp-faults-${randomUUID().slice(0, 8)}`;

function inRequest<T>(budgetMs: number, fn: () => T): T {
  return runWithContext({ deadline: budgetMs, hop: 'gateway', trace: TRACE }, fn);
}

/** Closes this file's connections from the broker's side, as a broker that restarts does. */
async function brokerDropsConnection(): Promise<number> {
  const { stdout } = await run('rabbitmqctl', [
    'list_connections',
    '-q',
    '--no-table-headers',
    'pid',
    'client_properties',
  ]);
  const pids = stdout
    .split('\n')
    .filter((line) => line.includes(CONNECTION_NAME))
    .map((line) => line.split('\t')[0] as string);
  for (const pid of pids) await run('rabbitmqctl', ['close_connection', pid, 'broker restart (test)']);
  return pids.length;
}

describe.runIf(available)('@deadline/amqp with amqp-connection-manager', () => {
  let manager: AmqpConnectionManager;
  let channel: ChannelWrapper;
  const q = queueName('manager');
  const rpc = queueName('manager-rpc');
  const transient: Error[] = [];

  beforeAll(async () => {
    manager = amqpManager.connect([RABBITMQ.url], {
      reconnectTimeInSeconds: 0.1,
      connectionOptions: { clientProperties: { connection_name: CONNECTION_NAME } },
    });
    channel = await boundedWrapper(manager, q, rpc, transient);
  });
  afterAll(async () => {
    await channel?.close();
    await manager?.close();
    if (available) {
      const cleanup = manager === undefined ? undefined : await amqpManager.connect([RABBITMQ.url]);
      const raw = cleanup?.createChannel({
        setup: (c: ConfirmChannel) => c.deleteQueue(q).then(() => c.deleteQueue(rpc)),
      });
      await raw?.waitForConnect();
      await raw?.close();
      await cleanup?.close();
    }
  });

  it('publishes with the budget (its promise rejected when too little is left) and handles inside it', async () => {
    const seen = deferred<{ remaining: number; trace: string | undefined; headers: Record<string, unknown> }>();
    const { consumerTag } = await channel.consume(rpc, (message) => {
      seen.resolve({
        remaining: remainingMs(),
        trace: currentContext()?.trace?.traceId,
        headers: message.properties.headers as Record<string, unknown>,
      });
      channel.ack(message);
    });
    await inRequest(1_500, () => channel.sendToQueue(rpc, Buffer.from('x'), { replyTo: 'r' }));
    const { remaining, trace, headers } = await seen.promise;
    expect(remaining).toBeGreaterThan(500);
    expect(remaining).toBeLessThanOrEqual(1_500);
    expect(trace).toBe(TRACE.traceId);
    expect(Number(headers['x-request-deadline'])).toBeLessThanOrEqual(1_500);
    await channel.cancel(consumerTag);

    withDeadline(channel, { serviceName: 'stock', publish: { minMs: 500 } });
    const refused = await inRequest(200, () => channel.sendToQueue(rpc, Buffer.from('y'), { replyTo: 'r' })).catch(
      (error: unknown) => error,
    );
    withDeadline(channel, { serviceName: 'stock' });
    expect(refused).toBeInstanceOf(DeadlineExceededError);
  });

  it('the broker drops the connection under load: nothing uncaught, nothing confirmed lost, requests come back', async () => {
    await expectProcessLives(async () => {
      const dropped = droppedMessages();
      const handled = new Set<number>();
      const { consumerTag } = await channel.consume(q, (message: ConsumeMessage) => {
        handled.add(Number(message.content.toString()));
        channel.ack(message);
      });
      // An RPC server on the same channel: it answers within each caller's budget.
      const server = await channel.consume(rpc, (message: ConsumeMessage) => {
        channel.sendToQueue(message.properties.replyTo as string, Buffer.from('pong'), {
          correlationId: message.properties.correlationId,
        });
        channel.ack(message);
      });
      expect((await inRequest(2_000, () => request(channel, rpc, Buffer.from('ping')))).content.toString()).toBe(
        'pong',
      );

      // Events (they carry no deadline: none may expire) published one after another, each confirmed by the broker.
      const confirmed: number[] = [];
      let stop = false;
      const publishing = (async () => {
        for (let i = 0; !stop; i++) {
          await inRequest(1_000, () => channel.sendToQueue(q, Buffer.from(String(i)), { persistent: true })).then(
            () => confirmed.push(i),
            () => {},
          );
        }
      })();
      await expect.poll(() => confirmed.length, { timeout: 10_000 }).toBeGreaterThan(20);
      // A request in flight when the connection goes: it ends at its deadline, whatever became of its reply.
      const inFlight = inRequest(1_500, () => request(channel, rpc, Buffer.from('ping'))).then(
        () => 'answered',
        (error: unknown) => error,
      );
      expect(await brokerDropsConnection()).toBeGreaterThan(0);
      const before = confirmed.length;
      await expect.poll(() => confirmed.length, { timeout: 20_000 }).toBeGreaterThan(before + 20);
      stop = true;
      await publishing;
      const outcome = await inFlight;
      expect(outcome === 'answered' || outcome instanceof DeadlineExceededError).toBe(true);
      // Every message the broker confirmed reaches the consumer, after the reconnect.
      await expect.poll(() => confirmed.filter((i) => !handled.has(i)), { timeout: 20_000 }).toEqual([]);
      expect((await inRequest(2_000, () => request(channel, rpc, Buffer.from('ping')))).content.toString()).toBe(
        'pong',
      );
      await channel.cancel(consumerTag);
      await channel.cancel(server.consumerTag);
      dropped.stop();
      // What the channel reported meanwhile: only the broker going away under it.
      for (const error of transient) expect(error.message).toMatch(/closed|ended|CONNECTION_FORCED|ECONNRESET/i);
    });
  }, 60_000);
});
