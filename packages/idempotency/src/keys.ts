/**
 * The `Idempotency-Key`s of a unit of work's outgoing calls that change something (POST, PATCH, a queued job).
 *
 * Why derived, and why from positions: an idempotent request that times out is retried, perhaps on another
 * instance, perhaps after a restart, and the retry must send the very keys the first attempt sent, so that a
 * downstream that already did the work recognises it. A key is therefore a function of a secret the attempts
 * share (stored with the inbound key's claim) and of the call's position in the work: its order among the calls
 * that asked for a key, and the branches (a `retry()`, a detached task) it was made in. Code that starts its
 * calls in the same order gets the same keys; nothing about the attempt (time, process, random) goes in.
 *
 * An HMAC, not a plain hash of the inbound key: two tenants may pick the same inbound key, and a downstream must
 * not see the same key for their two different orders; nor can anyone holding the inbound key predict the
 * downstream ones.
 */
import { createHmac } from 'node:crypto';
import { createContextKey, InvalidArgumentError } from '@deadline/core';
import { MAX_KEY_LENGTH } from './key-header.js';

/** Visible ASCII and space, at least one: what a structured-field string may hold. */
const PRINTABLE = /^[\x20-\x7e]+$/;

/**
 * Where the calls of a unit of work get their `Idempotency-Key`. The http adapter takes one for each POST and
 * PATCH without a key of its own, `enqueue()` one for each job without a `jobId`; `retry()` makes each attempt
 * start again from the same position, so every attempt sends the same keys.
 *
 * @example
 * ```ts
 * import { runWithContext } from '@deadline/core';
 * import { IDEMPOTENCY_KEYS, IdempotencyKeys } from '@deadline/idempotency/keys';
 *
 * // Every POST made inside carries a key derived from 'order-42'; the first one carries 'order-42' itself.
 * await runWithContext({ values: [IDEMPOTENCY_KEYS.with(IdempotencyKeys.fromKey('order-42'))] }, () =>
 *   fetch('http://payments/charges', { method: 'POST', body }),
 * );
 * ```
 */
export class IdempotencyKeys {
  readonly #secret: string;
  /** The position of this sequence's branch: '' at the top, '3/' for the branch made at position 3, … */
  readonly #path: string;
  /** The key of position 1 at the top, when the caller named it; derived otherwise. */
  readonly #first: string | undefined;
  #count = 0;

  private constructor(secret: string, path: string, first: string | undefined) {
    this.#secret = secret;
    this.#path = path;
    this.#first = first;
  }

  /**
   * Keys derived from `secret` (an inbound request's claim keeps one, so that a retry of it derives the same).
   *
   * @example
   * ```ts
   * const keys = IdempotencyKeys.fromSecret(claim.secret);
   * ```
   */
  static fromSecret(secret: string): IdempotencyKeys {
    if (typeof secret !== 'string' || secret.length === 0) {
      throw new InvalidArgumentError('secret', 'a non-empty string', secret);
    }
    return new IdempotencyKeys(secret, '', undefined);
  }

  /**
   * Keys for work the caller names with one key: the first call that asks gets `key` itself, later ones keys
   * derived from it.
   *
   * @example
   * ```ts
   * await retry(() => fetch(url, { method: 'POST', body }), { idempotencyKey: 'order-42' }); // uses fromKey
   * ```
   */
  static fromKey(key: string): IdempotencyKeys {
    if (typeof key !== 'string' || key.length === 0 || key.length > MAX_KEY_LENGTH || !PRINTABLE.test(key)) {
      throw new InvalidArgumentError(
        'idempotencyKey',
        `1 to ${MAX_KEY_LENGTH} visible ASCII characters and spaces`,
        key,
      );
    }
    return new IdempotencyKeys(key, '', key);
  }

  /**
   * The key for the next call, in order.
   *
   * @example
   * ```ts
   * headers['idempotency-key'] ??= IDEMPOTENCY_KEYS.get()?.next();
   * ```
   */
  next(): string {
    const position = ++this.#count;
    if (this.#first !== undefined && this.#path === '' && position === 1) return this.#first;
    return createHmac('sha256', this.#secret).update(`${this.#path}${position}`).digest('base64url');
  }

  /**
   * A sequence of its own at the next position: work that runs beside the rest (a detached task, a `retry()`)
   * gets keys that do not depend on how its calls interleave with the others'.
   *
   * @example
   * ```ts
   * const attempts = keys.branch(); // once per retry()
   * ```
   */
  branch(): IdempotencyKeys {
    return new IdempotencyKeys(this.#secret, `${this.#path}${++this.#count}/`, this.#first);
  }

  /**
   * The same sequence from its start: what each attempt of a `retry()` runs with, so that all send the same
   * keys.
   *
   * @example
   * ```ts
   * for (let attempt = 1; attempt <= 3; attempt++) {
   *   await runWithContext({ values: [IDEMPOTENCY_KEYS.with(branch.restart())] }, fn);
   * }
   * ```
   */
  restart(): IdempotencyKeys {
    return new IdempotencyKeys(this.#secret, this.#path, this.#first);
  }
}

/**
 * The context key under which a unit of work carries its {@link IdempotencyKeys}: set by an idempotent request
 * (`idempotency()`) and by each attempt of `retry({ idempotencyKey })`; read by the http adapter for each POST and
 * PATCH and by `enqueue()` for each job. Work detached with `withoutCancel()` gets a branch of its own, so that
 * its calls get the same keys however they interleave with the request's.
 *
 * @example
 * ```ts
 * const requestKey = IDEMPOTENCY_KEYS.get()?.next(); // inside an idempotent request: this step's key
 * ```
 */
export const IDEMPOTENCY_KEYS = createContextKey<IdempotencyKeys>('@deadline/idempotency/keys', {
  detached: (keys) => keys.branch(),
});
