/**
 * The messaging conformance suite (test/support/messaging-conformance.ts) on the real RabbitMQ: queues of this run,
 * consumers bounded by `withDeadline()`, requests by `request()` over direct reply-to, and a plain amqplib channel for
 * what a publisher or consumer without the library sends and sees.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import amqp, { type Channel, type ConsumeMessage } from 'amqplib';
import { describe } from 'vitest';
import { messagingConformance, type RawReply } from '../../../test/support/messaging-conformance.ts';
import { POSTGRES, RABBITMQ, requireService } from '../../../test/support/services.ts';
import { request, withDeadline } from '../src/index.ts';
import { queueName } from './support.ts';

const DIRECT_REPLY_TO = 'amq.rabbitmq.reply-to';
const available = (await requireService(RABBITMQ)) && (await requireService(POSTGRES));

/** A header table as text, names in lower case (what the suite compares). */
function textHeaders(table: Record<string, unknown> | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(table ?? {})) headers[name.toLowerCase()] = String(value);
  return headers;
}

/** A plain channel's requests over direct reply-to: each resolves with the reply to its correlation id. */
async function plainRequester(channel: Channel) {
  const waiting = new Map<string, (reply: RawReply) => void>();
  await channel.consume(
    DIRECT_REPLY_TO,
    (message) => {
      const resolve = waiting.get(String(message?.properties.correlationId));
      if (message !== null && resolve !== undefined) {
        resolve({ text: message.content.toString(), headers: textHeaders(message.properties.headers) });
      }
    },
    { noAck: true },
  );
  return (queue: string, headers: Record<string, string>) =>
    new Promise<RawReply>((resolve) => {
      const correlationId = randomUUID();
      waiting.set(correlationId, resolve);
      channel.sendToQueue(queue, Buffer.from('raw'), { replyTo: DIRECT_REPLY_TO, correlationId, headers });
    });
}

describe.runIf(available)('RabbitMQ', () => {
  messagingConformance('@deadline/amqp', async () => {
    const connection = await amqp.connect(RABBITMQ.url);
    const plain = await connection.createChannel();
    const client = withDeadline(await connection.createChannel());
    const rawRequest = await plainRequester(await connection.createChannel());
    const queues: string[] = [];
    return {
      driver: {
        protocol: 'amqp',
        async destination(name) {
          const q = queueName(`conformance-${name}`);
          await plain.assertQueue(q, { durable: false });
          queues.push(q);
          return q;
        },
        async serve(q, options, handler) {
          const channel = withDeadline(await connection.createChannel(), options);
          let open = true;
          await channel.consume(q, async (message) => {
            const m = message as ConsumeMessage;
            await handler({
              text: m.content.toString(),
              respond: (text) => {
                channel.sendToQueue(String(m.properties.replyTo), Buffer.from(text), {
                  correlationId: m.properties.correlationId,
                });
              },
            });
            // A handler that outlives its test (the service stopped under it) has no channel to acknowledge on.
            if (open) channel.ack(m);
          });
          return () => {
            open = false;
            return channel.close();
          };
        },
        async request(q, text) {
          return (await request(client, q, Buffer.from(text))).content.toString();
        },
        async publishEvent(q, text) {
          client.sendToQueue(q, Buffer.from(text));
        },
        rawRequest,
        async rawNext(q) {
          const channel = await connection.createChannel();
          let resolve!: (headers: Record<string, string>) => void;
          const next = new Promise<Record<string, string>>((r) => {
            resolve = r;
          });
          const { consumerTag } = await channel.consume(q, (message) => {
            if (message === null) return;
            channel.ack(message);
            resolve(textHeaders(message.properties.headers));
            channel.cancel(consumerTag).then(
              () => channel.close(),
              () => {},
            );
          });
          return { headers: next };
        },
        async rawResponder(q, delayMs) {
          const channel = await connection.createChannel();
          const answering = new Set<Promise<void>>();
          await channel.consume(
            q,
            (message) => {
              if (message === null) return;
              const answer = sleep(delayMs).then(() => {
                channel.sendToQueue(String(message.properties.replyTo), Buffer.from('late'), {
                  correlationId: message.properties.correlationId,
                });
              });
              answering.add(answer);
              answer.finally(() => answering.delete(answer));
            },
            { noAck: true },
          );
          return async () => {
            // Its answers still to go go first: the channel closes after them.
            await Promise.all(answering);
            await channel.close();
          };
        },
      },
      async close() {
        for (const q of queues) await plain.deleteQueue(q).catch(() => {});
        await connection.close();
      },
    };
  });
});
