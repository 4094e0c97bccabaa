/**
 * One checked-out connection working for one call (a query, or a transaction's statements). It owns the race
 * between the statement and the deadline: at the stop, the caller is answered at once and a CancelRequest goes
 * to the backend if one of our statements is running; the connection is handed back only once it is known
 * clean — the statement it was running failed with 57014, so the cancel was spent on it and cannot land on the
 * next borrower's query. Anything less certain, and the connection is destroyed instead.
 */
import type { Socket } from 'node:net';
import { CancelledError, DeadlineExceededError } from '@deadline/core';
import { callSpansWanted, markCausedBy, type OutgoingCall, runWithCall } from '@deadline/core/internal';
import { type CancelEndpoint, openCancelConnection, sendCancelRequest } from './cancel-request.js';
import {
  CONNECTION,
  connectionFailure,
  connectionOf,
  queryHeld,
  type SendStatement,
  type Statement,
} from './held-connection.js';

/** The parts of a pg `Client` / `PoolClient` used (node-postgres 8). */
export interface PgClientLike {
  query(text: string, values?: unknown[]): Promise<unknown>;
  processID?: number | null | undefined;
  secretKey?: number | null | undefined;
  host?: string | undefined;
  port?: number | undefined;
  connectionParameters?: { host?: string | undefined; port?: number | undefined } | undefined;
  /** node-postgres's `Connection`: its socket (a `net.Socket`, or TLS over one) tells which server it reached. */
  connection?: { stream?: unknown } | undefined;
  /** @internal */
  [CONNECTION]?: object;
}

/** Set on a lease of a user's single `pg.Client`, which is not ours to destroy: cleaning it up is the only way. */
export const CANNOT_DESTROY = Symbol('cannot destroy');

/** How long the caller's rejection may wait for the server to confirm the cancel. */
const CONFIRM_MS = 50;

/**
 * How long before the call's own stop a statement still running gets its cancel connection opened (ms) — at
 * most half the time it had left when it started, so a short statement under a short budget does not pay for
 * one. The fork the server makes for it is then behind us when the stop comes; one that ends in time closes it.
 */
const CANCEL_AHEAD_MS = 10;

/**
 * How long a statement may run on after its cancel was delivered before another is sent (ms). The server drops
 * a cancel that reaches the backend before it has read the statement off its socket (it is then "reading a
 * command", and a cancel there would interrupt nothing): on a busy machine the backend may not have run since the
 * statement was written. The statement would then run to its end — a write committed after the caller was told
 * it was cancelled. Seen once in four CI runs; the test: pg.test.ts, "a cancel the server dropped".
 */
const RESEND_AFTER_MS = 50;
/** At most this many cancels for one statement (the first and the resends). */
const MAX_CANCELS = 5;

/**
 * Where the cancel must go: the address the backend's own socket is connected to (the same server behind a
 * name that resolves to several, and no name to resolve at the stop), else the host and port it was given.
 */
function endpointOf(client: PgClientLike): CancelEndpoint {
  const stream = client.connection?.stream as { remoteAddress?: unknown; remotePort?: unknown } | undefined;
  if (typeof stream?.remoteAddress === 'string' && typeof stream.remotePort === 'number') {
    return { host: stream.remoteAddress, port: stream.remotePort };
  }
  const params = client.connectionParameters;
  return { host: params?.host ?? client.host, port: params?.port ?? client.port };
}

/**
 * The stop, with the driver's error as its cause. The driver's error is marked too: an ORM that wraps ours
 * copying its fields but not its class (MikroORM's DriverException keeps its `cause`, the driver's) is still
 * recognised by `isDeadlineExceededError()`.
 */
function withCause(error: Stop, cause: unknown): Stop {
  markCausedBy(cause, error);
  if (error instanceof CancelledError) return new CancelledError(error.message, { reason: error.reason, cause });
  return new DeadlineExceededError({
    budgetMs: error.budgetMs,
    elapsedMs: error.elapsedMs,
    phase: error.phase,
    target: error.target,
    whose: error.whose,
    hop: error.hop,
    message: error.message,
    cause,
  });
}

/** SQLSTATE query_canceled: our CancelRequest, or the server's own statement_timeout. */
export const QUERY_CANCELED = '57014';

type Stop = DeadlineExceededError | CancelledError;

export class Session {
  readonly client: PgClientLike;
  readonly call: OutgoingCall;
  #stopped: Stop | undefined;
  /** Our statement on the wire, if any: what a cancel would interrupt. */
  #active: Promise<unknown> | undefined;
  #cancel: Promise<boolean> | undefined;
  /** How many cancels were sent for the statement running at the stop. */
  #cancels = 0;
  /** Whether the statement running at the stop failed with 57014 (the cancel was spent on it). */
  #cancelSpent = false;
  readonly #waiters = new Set<(error: Stop) => void>();
  #lastSettled: Promise<void> = Promise.resolve();
  /** The cancel connection opened ahead for the statement running near the stop, nothing sent on it yet. */
  #ahead: Socket | undefined;
  #aheadTimer: NodeJS.Timeout | undefined;

  readonly #send: SendStatement | undefined;

  /** `send`: how a statement goes to the driver, when not by `client.query` (a patched prototype's original). */
  constructor(client: PgClientLike, call: OutgoingCall, send?: SendStatement) {
    this.client = client;
    this.call = call;
    this.#send = send;
    call.onStop((error) => {
      this.#stopped = error;
      const ahead = this.#takeAhead();
      // No cancel for a connection that failed: its backend was ended with it (a terminate, a restart) or is
      // out of reach. (Were the process id reused, the server would still refuse it: it checks the secret key.)
      if (this.#active !== undefined && connectionFailure(client) === undefined) {
        // First thing at the stop: the request is one write on a connection opened ahead, else a new one.
        this.#cancel = this.#cancelUntilStopped(this.#active, ahead);
        if (callSpansWanted()) this.#confirmOnCancelled(this.#active);
      } else {
        ahead?.destroy();
      }
      for (const reject of this.#waiters) reject(error);
      this.#waiters.clear();
    });
  }

  get stopped(): Stop | undefined {
    return this.#stopped;
  }

  /** Whether a CancelRequest was sent for this session's statement (it may still be on its way). */
  get cancelSent(): boolean {
    return this.#cancel !== undefined;
  }

  /** Runs one statement; rejects with the typed error the moment the call stops (the statement is cancelled). */
  query<R = unknown>(text: Statement, values?: unknown[]): Promise<R> {
    if (this.#stopped !== undefined) return Promise.reject(this.#stopped);
    // With the call in OpenTelemetry's context: instrumentation-pg's span, made inside, is the call's.
    const running = runWithCall(this.call, () => queryHeld<unknown>(this.client, text, values, this.#send));
    this.#active = running;
    this.#openAheadOfStop();
    const settled = running.then(
      () => {
        if (this.#active === running) this.#statementOver();
      },
      (error: { code?: string }) => {
        if (this.#active === running) this.#statementOver();
        if (this.#cancel !== undefined && error?.code === QUERY_CANCELED) this.#cancelSpent = true;
      },
    );
    this.#lastSettled = settled;
    return new Promise<R>((resolve, reject) => {
      // At the stop the cancel is on its way and the server answers it within a few ms. Waiting that long (no
      // more than CONFIRM_MS) lets the caller's error carry the driver's as its cause, and means the statement
      // is really over when the caller hears of it.
      let stop: Stop | undefined;
      let timer: NodeJS.Timeout | undefined;
      const onStop = (error: Stop) => {
        stop = error;
        timer = setTimeout(() => reject(error), CONFIRM_MS);
      };
      this.#waiters.add(onStop);
      running.then(
        (result) => {
          this.#waiters.delete(onStop);
          clearTimeout(timer);
          // Finished before the cancel could land: the result is real.
          resolve(result as R);
        },
        (error: unknown) => {
          this.#waiters.delete(onStop);
          clearTimeout(timer);
          reject(stop === undefined ? error : withCause(stop, error));
        },
      );
    });
  }

  /**
   * Tells the call when the server confirms the cancel: the statement's ErrorResponse with 57014, heard on the
   * connection before the driver settles the query (and before the pg instrumentation ends its span on it).
   */
  #confirmOnCancelled(statement: Promise<unknown>): void {
    // node-postgres's Client keeps its protocol connection, an EventEmitter, as `connection`.
    const connection = (connectionOf(this.client) as { connection?: Partial<NodeJS.EventEmitter> }).connection;
    if (typeof connection?.prependListener !== 'function' || typeof connection.off !== 'function') return;
    const onError = (message: { code?: unknown }) => {
      if (message?.code === QUERY_CANCELED) this.call.confirmStop('postgres 57014');
    };
    connection.prependListener('errorMessage', onError);
    const off = () => connection.off?.('errorMessage', onError);
    statement.then(off, off);
  }

  /**
   * Opens the cancel connection shortly before the call's stop is due, if the statement still runs then (a
   * call without a timeout has no due stop: a cancellation, if any, opens its connection when it comes).
   */
  #openAheadOfStop(): void {
    const timeoutMs = this.call.timeoutMs;
    if (timeoutMs === undefined || this.#ahead !== undefined || this.#aheadTimer !== undefined) return;
    const left = timeoutMs - this.call.elapsedMs();
    // Never at once: a statement that ends within the millisecond (most do) costs the server no connection.
    const wait = Math.max(1, left - Math.min(CANCEL_AHEAD_MS, left / 2));
    const timer = setTimeout(() => {
      this.#aheadTimer = undefined;
      if (this.#active !== undefined && this.#stopped === undefined) {
        this.#ahead = openCancelConnection(endpointOf(this.client));
      }
    }, wait);
    timer.unref();
    this.#aheadTimer = timer;
  }

  /** Our statement settled: no cancel will be needed for it (one opened ahead is closed unused). */
  #statementOver(): void {
    this.#active = undefined;
    this.#takeAhead()?.destroy();
  }

  /** The connection opened ahead, if any, now the caller's; the timer that would open one is disarmed. */
  #takeAhead(): Socket | undefined {
    if (this.#aheadTimer !== undefined) {
      clearTimeout(this.#aheadTimer);
      this.#aheadTimer = undefined;
    }
    const ahead = this.#ahead;
    this.#ahead = undefined;
    return ahead;
  }

  /**
   * Waits until the connection is quiet: our last statement settled and the cancel (if one was sent) delivered.
   * Resolves whether it is clean to reuse as far as the cancel goes (none sent, or spent on our statement).
   */
  async quiet(): Promise<boolean> {
    await this.#lastSettled;
    if (this.#cancel === undefined) return true;
    await this.#cancel;
    // After a resend, one of the cancels may still be on its way to whatever runs next on the connection.
    return this.#cancelSpent && this.#cancels === 1;
  }

  /**
   * Cancels `statement`: a CancelRequest (one write on the connection opened ahead, else a new one), then another
   * each time it still runs RESEND_AFTER_MS after the last was delivered. Resolves once the last is delivered.
   */
  async #cancelUntilStopped(statement: Promise<unknown>, ahead: Socket | undefined): Promise<boolean> {
    const target = { processID: this.client.processID, secretKey: this.client.secretKey, ...endpointOf(this.client) };
    let delivered = await sendCancelRequest(target, ahead);
    this.#cancels = 1;
    while (
      delivered &&
      this.#cancels < MAX_CANCELS &&
      this.#active === statement &&
      !(await settlesWithin(statement, RESEND_AFTER_MS)) &&
      connectionFailure(this.client) === undefined
    ) {
      this.#cancels++;
      delivered = await sendCancelRequest(target);
    }
    return delivered;
  }
}

/** Whether `work` settles (either way) within `ms`. */
function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(resolve, ms, false);
  });
  const settled = work.then(
    () => true,
    () => true,
  );
  return Promise.race([settled, late]).finally(() => clearTimeout(timer));
}
