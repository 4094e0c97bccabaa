/**
 * What the broker overload benchmark (broker-overload.ts) and its consumer process (broker-consumer.ts) say to each
 * other over the IPC channel. Times are epoch milliseconds with sub-millisecond precision (`performance.timeOrigin +
 * performance.now()`), one clock for every process of the one machine.
 */

/** The consumers with `@deadline/amqp` and `@deadline/pg`, or plain amqplib and pg. */
export type BrokerVariant = 'library' | 'plain';

/** How the consumer process is started (its one command-line argument, as JSON). */
export interface ConsumerConfig {
  variant: BrokerVariant;
  amqpUrl: string;
  postgresUrl: string;
  queue: string;
  /** Connections of its pool: the bottleneck. */
  poolSize: number;
  /** Messages the broker may hand it before it acknowledges them. */
  prefetch: number;
  /** Each message's statement: `pg_sleep(workMs / 1000)`. */
  workMs: number;
}

/** One statement a request's message ran: `[rid, startedAt, endedAt]`, timed where the driver sent it and heard back. */
export type BrokerStatement = [rid: number, startedAt: number, endedAt: number];

export type RunnerMessage = { type: 'collect' };

export type ConsumerMessage =
  | { type: 'ready' }
  | { type: 'failed'; reason: string }
  | {
      type: 'collected';
      statements: BrokerStatement[];
      /** Messages not handled because they arrived with no time left (library only). */
      expired: number;
      /** Answers not sent because they came after their message's deadline (library only). */
      lateAnswers: number;
      /** CPU time of the process since it started (user + system, µs). */
      cpuMicros: number;
    };

/** The runner's and the consumer's clock: epoch ms, sub-millisecond. */
export const now = (): number => performance.timeOrigin + performance.now();
