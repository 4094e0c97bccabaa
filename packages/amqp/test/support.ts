/**
 * What the RabbitMQ tests share: a connection per file, queues unique to the run (the broker is shared with other
 * files and runs), the `deadline:message:dropped` events, and a logger that keeps its lines.
 */
import { randomUUID } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import { DiagnosticsChannel, type MessageDroppedMessage } from '@deadline/core';
import type { AmqpConnectionManager, ChannelWrapper } from 'amqp-connection-manager';
import type { ConfirmChannel } from 'amqplib';
import { withDeadline } from '../src/index.ts';

/** Names unique to this run. */
export const RUN = randomUUID().slice(0, 8);

/** A queue name of this run. */
export function queueName(name: string): string {
  return `deadline-amqp-${RUN}-${name}`;
}

/** The events of messages dropped for lack of time, from now until `stop()`. */
export function droppedMessages(): { events: MessageDroppedMessage[]; stop(): void } {
  const events: MessageDroppedMessage[] = [];
  const listener = (message: unknown) => events.push(message as MessageDroppedMessage);
  diagnostics.subscribe(DiagnosticsChannel.MessageDropped, listener);
  return { events, stop: () => diagnostics.unsubscribe(DiagnosticsChannel.MessageDropped, listener) };
}

/** A logger for `withDeadline()` that keeps its lines (pino's `info`/`warn`, with the level). */
export class Lines {
  readonly lines: (Record<string, unknown> & { level: 'info' | 'warn'; msg: string })[] = [];
  readonly logger = {
    info: (line: object, msg: string) => this.lines.push({ ...line, level: 'info', msg }),
    warn: (line: object, msg: string) => this.lines.push({ ...line, level: 'warn', msg }),
  };

  of(queue: string): (Record<string, unknown> & { level: 'info' | 'warn'; msg: string })[] {
    return this.lines.filter((line) => line.method === queue);
  }
}

/** A promise and its resolver. */
export function deferred<T>(): { promise: Promise<T>; resolve(value: T): void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/**
 * A channel of `manager`, bounded as the service `stock`, whose setup declares `queue` (durable) and `rpc`, connected.
 * Its `'error'` events go to `errors`: amqp-connection-manager reports there a consumer it fails to re-create while
 * the broker comes back (the connection closing again under it), and without a listener the process would crash.
 */
export async function boundedWrapper(
  manager: AmqpConnectionManager,
  queue: string,
  rpc: string,
  errors: Error[],
): Promise<ChannelWrapper> {
  const channel = withDeadline(
    manager.createChannel({
      setup: async (raw: ConfirmChannel) => {
        await raw.assertQueue(queue, { durable: true });
        await raw.assertQueue(rpc, { durable: false });
      },
    }),
    { serviceName: 'stock' },
  );
  channel.on('error', (error: Error) => errors.push(error));
  await channel.waitForConnect();
  return channel;
}
