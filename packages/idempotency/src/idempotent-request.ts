/**
 * One request that holds its key: the token it claimed with, the steps recorded so far (its own and earlier
 * owners'), the keys its outgoing calls derive theirs from, and the end of it: the result stored, or the key given
 * back for the next request to take over.
 *
 * The writes that record a result happen when the work is done, which may be just after the request's deadline
 * (a charge that answered as the budget ran out): they run outside the request's context, under a budget of their
 * own (`storeTimeoutMs`), so that a deadline-bounded client does not refuse the one write that matters most.
 */
import { createContext, type DeadlineContext, type OwnedContext, runWithDeadline } from '@deadline/core';
import { outsideContext, type Scope, storage } from '@deadline/core/internal';
import { IdempotencyKeyLostError } from './errors.js';
import { IDEMPOTENCY_KEYS, IdempotencyKeys } from './keys.js';
import type { ResolvedOptions } from './options.js';
import type { IdempotencyStore, StoredResponse } from './store.js';
import { wake } from './waiters.js';

/** Each context an idempotent request runs its handler in, to its request. */
const requests = new WeakMap<object, IdempotentRequest>();

/** @internal The idempotent request the current code runs in, if any (looked up through the context's parents). */
export function currentRequest(): IdempotentRequest | undefined {
  for (let scope: Scope | undefined = storage.getStore(); scope !== undefined; scope = scope.parent) {
    const request = requests.get(scope);
    if (request !== undefined) return request;
  }
  return undefined;
}

const RUNNING = 0;
const FINISHED = 1;

/**
 * A response as the host saw it go out, for {@link IdempotentRequest.finish}.
 * @internal
 */
export interface SentResponse {
  status: number;
  headers: Readonly<Record<string, unknown>>;
  /** The whole body, or `undefined` when it was not seen whole (streamed). */
  body: Buffer | undefined;
  /** The body's size in bytes; -1 when unknown. */
  bodyBytes: number;
}

/** @internal */
export class IdempotentRequest {
  readonly scope: string;
  readonly #token: string;
  readonly #options: ResolvedOptions<unknown>;
  readonly #store: IdempotencyStore;
  /** Recorded step results, as JSON texts of `{ v: result }`. */
  readonly #steps: Map<string, string>;
  /** Steps running now: a second call with the same name waits for the first. */
  readonly #running = new Map<string, Promise<unknown>>();
  /** The context the handler runs in: the request's, with the keys of its outgoing calls. */
  readonly context: OwnedContext;
  #state = RUNNING;

  constructor(
    scope: string,
    token: string,
    secret: string,
    steps: Readonly<Record<string, string>>,
    options: ResolvedOptions<unknown>,
  ) {
    this.scope = scope;
    this.#token = token;
    this.#options = options;
    this.#store = options.store;
    this.#steps = new Map(Object.entries(steps));
    this.context = createContext({ values: [IDEMPOTENCY_KEYS.with(IdempotencyKeys.fromSecret(secret))] });
    requests.set(this.context, this);
  }

  /** Runs `fn` as the step `name`, or returns what it returned before (this attempt's or an earlier one's). */
  async step<T>(name: string, fn: () => T | Promise<T>, context: DeadlineContext | undefined): Promise<T> {
    // Every step takes a position in the keys, run or skipped: the calls after it get the same keys either way.
    const keys = context === undefined ? undefined : IDEMPOTENCY_KEYS.get(context)?.branch();
    const recorded = this.#steps.get(name);
    if (recorded !== undefined) return (JSON.parse(recorded) as { v: T }).v;
    const running = this.#running.get(name);
    if (running !== undefined) return running as Promise<T>;
    // Past the deadline no new step starts: the lock is about to end and another request may take the key over.
    const stopped = context?.stopReason;
    if (stopped !== undefined) throw stopped;
    const work = this.#runStep(name, fn, keys);
    this.#running.set(name, work);
    try {
      return await work;
    } finally {
      this.#running.delete(name);
    }
  }

  async #runStep<T>(name: string, fn: () => T | Promise<T>, keys: IdempotencyKeys | undefined): Promise<T> {
    const inner = keys === undefined ? undefined : createContext({ values: [IDEMPOTENCY_KEYS.with(keys)] });
    let value: T;
    try {
      value = await (inner === undefined ? fn() : inner.run(fn));
    } finally {
      // Not cancelled: what the step returned (a response whose body is still to be read) must stay usable.
      inner?.end({ cancel: false });
    }
    let text: string;
    try {
      text = JSON.stringify({ v: value });
    } catch (error) {
      throw new TypeError(`step '${name}': its result cannot be stored as JSON (${(error as Error).message})`, {
        cause: error,
      });
    }
    const saved = await this.#write(() => this.#store.saveStep(this.scope, this.#token, name, text));
    if (!saved) throw new IdempotencyKeyLostError(name, this.scope);
    this.#steps.set(name, text);
    return value;
  }

  /**
   * Ends the request: stores its result, or, when it was cut (its context stopped) or its status is not a result
   * (`storeStatus`), gives the key back. Never rejects: a store that fails is reported as a warning, and the lock
   * then ends by itself. Idempotent.
   */
  async finish(response: SentResponse | undefined, stopped: boolean): Promise<void> {
    if (this.#state !== RUNNING) return;
    this.#state = FINISHED;
    this.context.end({ cancel: false });
    try {
      await this.#stepsSettled();
      if (response === undefined || stopped || !this.#options.storeStatus(response.status)) {
        await this.#write(() => this.#store.release(this.scope, this.#token));
      } else {
        await this.#write(() => this.#store.complete(this.scope, this.#token, this.#stored(response)));
      }
    } catch (error) {
      process.emitWarning(`could not record the end of an idempotent request: ${(error as Error)?.message}`, {
        type: 'DeadlineWarning',
        code: 'DEADLINE_IDEMPOTENCY_STORE',
        detail: (error as Error)?.stack,
      });
    } finally {
      wake(this.scope);
    }
  }

  /**
   * Waits for the steps still running — a request cut at its deadline whose step finishes a moment after the 504
   * (work that does not stop at the signal, a statement that completed as its cancel was sent) — to be recorded
   * (or to fail), and only then lets the key go: a retry sent at once, as the soak's clients send theirs, would
   * otherwise take it over without the step and run it again. No longer than the lock's grace: a step that
   * outruns it would lose the key to a retry anyway.
   */
  async #stepsSettled(): Promise<void> {
    if (this.#running.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const graceOver = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, this.#options.lockGraceMs);
    });
    try {
      await Promise.race([Promise.allSettled([...this.#running.values()]), graceOver]);
    } finally {
      clearTimeout(timer);
    }
  }

  #stored(response: SentResponse): StoredResponse {
    const headers: Record<string, string> = {};
    for (const name of this.#options.storeHeaders) {
      const value = response.headers[name];
      if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(', ') : String(value);
    }
    const whole = response.body !== undefined && response.body.length <= this.#options.maxBodyBytes;
    return { status: response.status, headers, body: whole ? response.body : undefined, bodyBytes: response.bodyBytes };
  }

  /** A store write outside the request's context, under its own budget. */
  #write<T>(write: () => Promise<T>): Promise<T> {
    return outsideContext(() => runWithDeadline(this.#options.storeTimeoutMs, write));
  }
}
