/**
 * The broker overload benchmark's callers: each request is an RPC over RabbitMQ's direct reply-to with a 1 s budget,
 * abandoned when that runs out, as a real caller would. `library`: `request()` of `@deadline/amqp` inside the
 * caller's deadline (the message carries its budget and expires with it); `plain`: the same RPC with amqplib alone
 * (a correlation id, a timer), the message knowing nothing of its caller's patience.
 */
import { randomUUID } from 'node:crypto';
import { request, withDeadline } from '@deadline/amqp';
import { DeadlineExceededError, runWithDeadline } from '@deadline/core';
import amqp, { type Channel, type ChannelModel, type ConsumeMessage } from 'amqplib';
import { pendingRecord, type RequestRecord } from '../overload-load.js';
import { type BrokerVariant, now } from './broker-protocol.js';

const DIRECT_REPLY_TO = 'amq.rabbitmq.reply-to';
/** What the library's callers keep back from each request's budget for the reply's way back (ms). */
export const MARGIN_MS = 20;

export class BrokerClient {
  readonly budgetMs: number;
  readonly records: RequestRecord[] = [];
  readonly #variant: BrokerVariant;
  readonly #queue: string;
  readonly #connection: ChannelModel;
  readonly #channel: Channel;
  readonly #pending = new Map<string, (message: ConsumeMessage) => void>();
  #unsettled = 0;
  #nextRid: () => number;

  private constructor(
    variant: BrokerVariant,
    queue: string,
    connection: ChannelModel,
    channel: Channel,
    budgetMs: number,
    nextRid: () => number,
  ) {
    this.#variant = variant;
    this.#queue = queue;
    this.#connection = connection;
    this.#channel = channel;
    this.budgetMs = budgetMs;
    this.#nextRid = nextRid;
  }

  static async open(options: {
    variant: BrokerVariant;
    amqpUrl: string;
    queue: string;
    budgetMs: number;
    nextRid: () => number;
  }): Promise<BrokerClient> {
    const connection = await amqp.connect(options.amqpUrl);
    const channel = await connection.createChannel();
    const client = new BrokerClient(
      options.variant,
      options.queue,
      connection,
      // The reply's way back is kept from each request's budget, as the guide advises for request().
      options.variant === 'library' ? withDeadline(channel, { publish: { marginMs: MARGIN_MS } }) : channel,
      options.budgetMs,
      options.nextRid,
    );
    if (options.variant === 'plain') {
      await channel.consume(
        DIRECT_REPLY_TO,
        (message) => {
          const id = message?.properties.correlationId;
          const resolve = typeof id === 'string' ? client.#pending.get(id) : undefined;
          if (resolve !== undefined && message !== null) resolve(message);
        },
        { noAck: true },
      );
    }
    return client;
  }

  /** Requests not settled yet. */
  get pending(): number {
    return this.#unsettled;
  }

  /** Sends one request; resolves when it settled (never rejects). */
  async send(scheduledAt = now()): Promise<RequestRecord> {
    const record = pendingRecord(this.#nextRid(), scheduledAt, now(), this.budgetMs);
    const { rid } = record;
    this.records.push(record);
    this.#unsettled++;
    try {
      const answered = this.#variant === 'library' ? await this.#library(rid) : await this.#plain(rid);
      if (answered) {
        record.doneAt = now();
        record.outcome = 'ok';
      } else record.outcome = 'gave-up';
    } catch (error) {
      record.outcome = error instanceof DeadlineExceededError ? 'gave-up' : 'error';
      if (record.outcome === 'error') record.doneAt = now();
    } finally {
      this.#unsettled--;
    }
    return record;
  }

  async #library(rid: number): Promise<boolean> {
    await runWithDeadline(this.budgetMs, () => request(this.#channel, this.#queue, Buffer.from(String(rid))));
    return true;
  }

  #plain(rid: number): Promise<boolean> {
    const id = randomUUID();
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        resolve(false);
      }, this.budgetMs);
      this.#pending.set(id, () => {
        clearTimeout(timer);
        this.#pending.delete(id);
        resolve(true);
      });
      this.#channel.sendToQueue(this.#queue, Buffer.from(String(rid)), { replyTo: DIRECT_REPLY_TO, correlationId: id });
    });
  }

  /** Waits until every request sent has settled (at most one budget and a little). */
  async settle(): Promise<void> {
    const until = now() + this.budgetMs + 5_000;
    while (this.#unsettled > 0 && now() < until) await new Promise((resolve) => setTimeout(resolve, 20));
  }

  close(): Promise<void> {
    return this.#connection.close();
  }
}
