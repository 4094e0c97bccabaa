/**
 * `grpc-timeout` values no gRPC library would send, sent to an RPC server's test service (packages/grpc,
 * packages/connect) by the bare HTTP/2 client of raw-http2.ts: what each server answered, whether its handler ran, and
 * the call's line. The two servers' own readings of the values differ (grpc-js wraps large ones, Connect refuses what
 * it cannot read); what the library must make of a zero is the same for both.
 */
import type { EventEmitter } from 'node:events';
import { expect } from 'vitest';
import { grpcFrame, inspectRequest } from './grpc-wire.ts';
import { type RawAnswer, rawGrpc, rawSession } from './raw-http2.ts';
import type { CallLine, CallLines } from './statement-cut-off.ts';

const INSPECT = '/deadline.test.Inventory/Inspect';

/** Zero of every unit, and values below one millisecond: nothing left, whatever the unit. */
export const ZERO_TIMEOUTS: readonly string[] = ['0H', '0M', '0S', '0m', '0u', '0n', '00000000m', '1n', '999u'];

/** What came of one call. */
export interface HostileAnswer {
  answer: RawAnswer;
  /** Whether the handler ran. */
  ran: boolean;
  /** The call's line; none when the protocol library refused the value before any handler. */
  line: CallLine | undefined;
}

/**
 * Sends Inspect calls with a `grpc-timeout` of the test's choosing to the service at `origin`, as a caller it trusts
 * (`x-internal: 1`, so that `maxMs`, not `defaultMs`, clamps what it asks). `refusedBefore`: the gRPC status the
 * protocol library answers a value it cannot read with, before any handler (grpc-js `13`, Connect `3`).
 */
export class HostileTimeouts {
  /** The service's origin, read at each call (the test starts its server after making this). */
  readonly #origin: () => string;
  readonly #lines: CallLines;
  readonly #events: EventEmitter;
  readonly #refusedBefore: string;
  #handled = 0;
  readonly #onInspect = () => {
    this.#handled++;
  };

  constructor(origin: () => string, lines: CallLines, events: EventEmitter, refusedBefore: string) {
    this.#origin = origin;
    this.#lines = lines;
    this.#events = events;
    this.#refusedBefore = refusedBefore;
  }

  /** Counts the handler's runs from now on (the service emits `inspect` as its handler starts). */
  start(): void {
    this.#events.on('inspect', this.#onInspect);
  }

  stop(): void {
    this.#events.off('inspect', this.#onInspect);
  }

  /** One call with `grpc-timeout: value` (an array is sent as repeated fields). */
  async send(value: string | string[]): Promise<HostileAnswer> {
    const session = rawSession(this.#origin());
    const before = this.#handled;
    const seen = this.#lines.lines.length;
    try {
      const answer = await rawGrpc(
        session,
        INSPECT,
        { 'grpc-timeout': value, 'x-internal': '1' },
        grpcFrame(inspectRequest()),
      );
      const line = answer.grpcStatus === this.#refusedBefore ? undefined : await this.#lines.after(seen);
      return { answer, ran: this.#handled > before, line };
    } finally {
      session.close();
    }
  }

  /**
   * A call with `value` is refused at once: DEADLINE_EXCEEDED naming `hop`, its handler not run, its line saying
   * less than the service's minimum of 10 ms was left (`999u` is 1 ms to Connect, 0 to grpc-js).
   */
  async expectRefused(value: string, hop: string): Promise<HostileAnswer> {
    const sent = await this.send(value);
    const { answer, ran, line } = sent;
    expect({ value, status: answer.grpcStatus, by: answer.exceededBy, ran }).toEqual({
      value,
      status: '4',
      by: hop,
      ran: false,
    });
    expect(line, value).toMatchObject({ outcome: 'deadline_exceeded' });
    expect(line?.budgetMs as number, value).toBeLessThan(10);
    return sent;
  }
}
