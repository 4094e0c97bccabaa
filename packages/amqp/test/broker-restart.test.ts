/**
 * RabbitMQ itself restarts (`rabbitmqctl stop_app`, then `start_app`) under a service bounded by `@deadline/amqp`
 * through amqp-connection-manager: nothing reaches the process uncaught; a request in flight ends at its deadline;
 * what is published while the broker is down waits for it and goes when it is back; every persistent message the
 * broker confirmed is still there and handled; requests work again. The broker is shared by every test file, so this
 * one runs alone, after the others (vitest.config.ts, `ALONE`).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { DeadlineExceededError, runWithContext, traceFrom } from '@deadline/core';
import amqpManager, { type AmqpConnectionManager, type ChannelWrapper } from 'amqp-connection-manager';
import type { ConsumeMessage } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProcessLives } from '../../../test/support/process-watch.ts';
import { RABBITMQ, requireService } from '../../../test/support/services.ts';
import { request } from '../src/index.ts';
import { boundedWrapper, queueName } from './support.ts';

const run = promisify(execFile);
const TRACE = traceFrom('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
const available = await requireService(RABBITMQ);

function inRequest<T>(budgetMs: number, fn: () => T): T {
  return runWithContext({ deadline: budgetMs, hop: 'gateway', trace: TRACE }, fn);
}

describe.runIf(available)('@deadline/amqp: the broker restarts', () => {
  let manager: AmqpConnectionManager;
  let channel: ChannelWrapper;
  const q = queueName('restart');
  const rpc = queueName('restart-rpc');
  const transient: Error[] = [];

  beforeAll(async () => {
    manager = amqpManager.connect([RABBITMQ.url], { reconnectTimeInSeconds: 0.2 });
    channel = await boundedWrapper(manager, q, rpc, transient);
  });
  afterAll(async () => {
    // Whatever happened, the broker is left running for whoever comes next.
    await run('rabbitmqctl', ['start_app']).catch(() => {});
    await run('rabbitmqctl', ['await_startup']).catch(() => {});
    await channel?.deleteQueue(q).catch(() => {});
    await channel?.close();
    await manager?.close();
  });

  it('nothing uncaught, a request in flight ends at its deadline, nothing confirmed lost, requests come back', async () => {
    await expectProcessLives(async () => {
      // Events the broker confirmed before it stops: persistent, on a durable queue.
      const before = Array.from({ length: 30 }, (_, i) => i);
      for (const i of before) await channel.sendToQueue(q, Buffer.from(String(i)), { persistent: true });
      // A request nobody answers: in flight when the broker goes.
      const started = Date.now();
      const inFlight = inRequest(3_000, () => request(channel, rpc, Buffer.from('ping'))).catch((e: unknown) => e);
      await run('rabbitmqctl', ['stop_app']);
      // Published while the broker is down: amqp-connection-manager holds them until it is back.
      const during = Array.from({ length: 10 }, (_, i) => 100 + i);
      const publishing = Promise.all(
        during.map((i) =>
          inRequest(30_000, () => channel.sendToQueue(q, Buffer.from(String(i)), { persistent: true })),
        ),
      );
      const caught = await inFlight;
      expect(caught).toBeInstanceOf(DeadlineExceededError);
      expect((caught as DeadlineExceededError).whose).toBe('local');
      expect(Date.now() - started).toBeLessThan(5_000);
      await run('rabbitmqctl', ['start_app']);
      await publishing;

      const handled = new Set<number>();
      await channel.consume(q, (message: ConsumeMessage) => {
        handled.add(Number(message.content.toString()));
        channel.ack(message);
      });
      await expect.poll(() => [...before, ...during].filter((i) => !handled.has(i)), { timeout: 20_000 }).toEqual([]);

      // Requests work again: an RPC server on the same channel answers within the caller's budget.
      await channel.consume(rpc, (message: ConsumeMessage) => {
        channel.sendToQueue(String(message.properties.replyTo), Buffer.from('pong'), {
          correlationId: message.properties.correlationId,
        });
        channel.ack(message);
      });
      await expect
        .poll(
          async () =>
            (
              await inRequest(1_000, () => request(channel, rpc, Buffer.from('ping'))).catch(() => undefined)
            )?.content?.toString(),
          { timeout: 20_000 },
        )
        .toBe('pong');
      // What the channel reported meanwhile: only the broker going away under it.
      for (const error of transient)
        expect(error.message).toMatch(/closed|ended|CONNECTION_FORCED|ECONNRESET|ECONNREFUSED/i);
    });
  }, 90_000);
});
