/**
 * What the RPC servers' foreign-client tests watch on the server's side (packages/grpc, packages/connect): the call's
 * line, and a 5 s PostgreSQL statement run by the test service's `Query` handler — when it is gone from
 * pg_stat_activity, and what the handler's query failed with.
 */
import { expect } from 'vitest';
import type { ServerActivity } from '../../packages/pg/test/support/activity.ts';
import { marker } from '../../packages/pg/test/support/activity.ts';
import type { Sent } from './foreign-clients.ts';
import { next } from './rpc-seen.ts';

/** One call's line, as a server adapter's `logger` writes it. */
export type CallLine = Record<string, unknown>;

/** A `logger` for a server adapter that keeps its lines, in order. */
export class CallLines {
  readonly lines: CallLine[] = [];
  readonly logger = {
    info: (line: object) => this.lines.push(line as CallLine),
    warn: (line: object) => this.lines.push(line as CallLine),
  };

  /** The line of the first call to end after `seen` lines were written (waited for, 10 s at most). */
  async after(seen: number): Promise<CallLine> {
    await expect.poll(() => this.lines.length, { timeout: 10_000 }).toBeGreaterThan(seen);
    return this.lines[seen] as CallLine;
  }
}

/** What became of a call whose handler ran a 5 s statement. */
export interface CutOff<T> {
  /** What the client said. */
  answer: T;
  /** From the moment the call was sent until the statement was gone from pg_stat_activity, in ms. */
  goneAfterMs: number;
  /** What the handler's query failed with. */
  error: unknown;
  line: CallLine;
}

/**
 * Sends a call whose handler runs `SELECT pg_sleep(5)` (`call(sql)`, whose answer says when the call was sent) and
 * waits, by polling the server, until the statement has started and is gone again.
 */
export async function cutOffStatement<T extends Sent>(
  activity: ServerActivity,
  lines: CallLines,
  call: (sql: string) => Promise<T>,
): Promise<CutOff<T>> {
  const m = marker();
  const failed = next<unknown>('query-error');
  const line = lines.after(lines.lines.length);
  const answer = call(`SELECT pg_sleep(5) /* ${m} */`);
  // Awaited below: a client that fails meanwhile must not be an unhandled rejection.
  answer.catch(() => {});
  await activity.startedRunning(m);
  const goneAt = await activity.goneAt(m);
  const answered = await answer;
  return { answer: answered, goneAfterMs: goneAt - answered.sentAt, error: await failed, line: await line };
}
