/**
 * One checked-out connection working for one call (a query, or a transaction's statements). It owns the race
 * between the statement and the deadline: at the stop, the caller is answered at once and a CancelRequest goes
 * to the backend if one of our statements is running; the connection is handed back only once it is known
 * clean — the statement it was running failed with 57014, so the cancel was spent on it and cannot land on the
 * next borrower's query. Anything less certain, and the connection is destroyed instead.
 */
import { CancelledError, DeadlineExceededError } from '@deadline/core';
import type { OutgoingCall } from '@deadline/core/internal';
import { sendCancelRequest } from './cancel-request.js';

/** The parts of a pg `Client` / `PoolClient` used (node-postgres 8). */
export interface PgClientLike {
  query(text: string, values?: unknown[]): Promise<unknown>;
  processID?: number | null | undefined;
  secretKey?: number | null | undefined;
  host?: string | undefined;
  port?: number | undefined;
  connectionParameters?: { host?: string | undefined; port?: number | undefined } | undefined;
}

/** Set on a lease of a user's single `pg.Client`, which is not ours to destroy: cleaning it up is the only way. */
export const CANNOT_DESTROY = Symbol('cannot destroy');

/** How long the caller's rejection may wait for the server to confirm the cancel. */
const CONFIRM_MS = 50;

/** The stop, with the driver's error as its cause. */
function withCause(error: Stop, cause: unknown): Stop {
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
  /** Whether the statement running at the stop failed with 57014 (the cancel was spent on it). */
  #cancelSpent = false;
  readonly #waiters = new Set<(error: Stop) => void>();
  #lastSettled: Promise<void> = Promise.resolve();

  constructor(client: PgClientLike, call: OutgoingCall) {
    this.client = client;
    this.call = call;
    call.onStop((error) => {
      this.#stopped = error;
      if (this.#active !== undefined) {
        const params = client.connectionParameters;
        this.#cancel = sendCancelRequest({
          processID: client.processID,
          secretKey: client.secretKey,
          host: params?.host ?? client.host,
          port: params?.port ?? client.port,
        });
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
  query<R = unknown>(text: string, values?: unknown[]): Promise<R> {
    if (this.#stopped !== undefined) return Promise.reject(this.#stopped);
    const running = values === undefined ? this.client.query(text) : this.client.query(text, values);
    this.#active = running;
    const settled = running.then(
      () => {
        if (this.#active === running) this.#active = undefined;
      },
      (error: { code?: string }) => {
        if (this.#active === running) this.#active = undefined;
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
   * Waits until the connection is quiet: our last statement settled and the cancel (if one was sent) delivered.
   * Resolves whether it is clean to reuse as far as the cancel goes (none sent, or spent on our statement).
   */
  async quiet(): Promise<boolean> {
    await this.#lastSettled;
    if (this.#cancel === undefined) return true;
    await this.#cancel;
    return this.#cancelSpent;
  }
}
