/**
 * What happens to a request before its handler runs, whatever the host: its key read, its payload fingerprinted,
 * its key claimed; and then one of three things: it runs (holding the key), it gets an answer without running (a
 * replay, a problem), or it passes through untouched (no key, a method not covered, a store down with
 * `failOpen`). A request whose key is held by another one waits for that one's answer within its own budget.
 */
import { createHash, randomUUID } from 'node:crypto';
import { runWithDeadline } from '@deadline/core';
import { outsideContext, type Scope } from '@deadline/core/internal';
import { fingerprintOf } from './fingerprint.js';
import { IdempotentRequest } from './idempotent-request.js';
import { IDEMPOTENCY_KEY_HEADER, parseIdempotencyKey } from './key-header.js';
import type { ResolvedOptions } from './options.js';
import { type Answer, bodyNotStored, conflict, invalid, missing, reused, storeUnavailable } from './problems.js';
import type { StoredResponse } from './store.js';
import { changeOrTimeout } from './waiters.js';

/**
 * The header that marks a replayed answer (`Idempotent-Replayed: true`, as Stripe names it).
 *
 * @example
 * ```ts
 * if (response.headers.get(REPLAYED_HEADER) === 'true') log.info('the order was already placed');
 * ```
 */
export const REPLAYED_HEADER = 'idempotent-replayed';

/**
 * A waiting duplicate answers 409 this long before its own deadline (ms), so that the 409 goes out before its
 * server adapter answers 504: the client learns it may retry, not that its budget was too small. It stops waiting
 * then, and a look at the key still out then is not waited for (CI, a loaded machine: a look that took longer
 * than the margin ran into the deadline, and the duplicate got 504).
 */
const ANSWER_MARGIN_MS = 25;
/** The first look again at a key held in another process (ms); doubled each time, up to MAX_POLL_MS. */
const FIRST_POLL_MS = 5;
const MAX_POLL_MS = 100;

/** @internal What the host knows of the request. */
export interface RequestFacts {
  method: string;
  route: string;
  /** Node's `headersDistinct`: each header's values, unjoined. */
  headers: Readonly<Record<string, readonly string[] | undefined>>;
  body: unknown;
}

/** @internal */
export type Admission =
  | { readonly kind: 'pass'; readonly cause?: unknown }
  | { readonly kind: 'answer'; readonly answer: Answer; readonly cause?: unknown }
  | { readonly kind: 'run'; readonly request: IdempotentRequest; readonly cause?: undefined };

const PASS: Admission = { kind: 'pass' };

/**
 * @internal Decides what happens to the request (see the file's header). Rejects only with what the `tenant`
 * option threw, or with the request's own stop reason (its deadline passed while the store was asked), which its
 * server adapter answers.
 */
export async function admit<Req>(
  options: ResolvedOptions<Req>,
  request: Req,
  facts: RequestFacts,
  context: Scope | undefined,
): Promise<Admission> {
  if (!options.methods.has(facts.method)) return PASS;
  const tenant = options.tenant?.(request);
  const read = parseIdempotencyKey(facts.headers[IDEMPOTENCY_KEY_HEADER]);
  if (read.kind === 'absent') return options.required ? answer(missing()) : PASS;
  if (read.kind === 'invalid') return answer(invalid(read.reason));
  const named: Record<string, string | undefined> = {};
  for (const name of options.fingerprintHeaders) named[name] = facts.headers[name]?.join(', ');
  const fingerprint = fingerprintOf(facts.body, named);
  const scope = createHash('sha256')
    .update(JSON.stringify([tenant ?? '', facts.method, facts.route, read.key]))
    .digest('base64url');
  const token = randomUUID();
  const secret = randomUUID();
  let pollMs = FIRST_POLL_MS;
  /** The owner's lock time left at the last look that found the key busy; undefined before. */
  let busyLockLeftMs: number | undefined;
  for (;;) {
    const left = context?.remainingMs() ?? Number.POSITIVE_INFINITY;
    // Back from waiting on a busy key, with no time left to look again: the 409 was due, and it goes out now, in
    // the turn the wait ended. The wait's timer is due before the deadline's, so even a stalled loop that finds both
    // due at once runs this first. Asking `stopReason` here would stop the context then and there (its deadline
    // passed during the stall) and its 504 would go out instead (CI, Node 22: a 300 ms duplicate got 504).
    if (busyLockLeftMs !== undefined && left - ANSWER_MARGIN_MS < FIRST_POLL_MS && context?._knownStopped !== true) {
      return answer(conflict(busyLockLeftMs));
    }
    if (context?.stopReason !== undefined) throw context.stopReason;
    const lockMs = Number.isFinite(left) ? Math.ceil(Math.max(0, left)) + options.lockGraceMs : options.lockMs;
    let claim: Awaited<ReturnType<typeof options.store.claim>>;
    try {
      const look = options.store.claim({ scope, fingerprint, token, secret, lockMs, ttlMs: options.ttlMs });
      // Looking again at a busy key: the answer is due before the deadline, whatever the look is doing then.
      const looked = busyLockLeftMs === undefined ? await look : await lookUntil(look, left - ANSWER_MARGIN_MS);
      if (looked === undefined) {
        // Won later, the key must not stay held by a request that answered 409.
        void look
          .then((late) => (late.kind === 'claimed' ? releaseLate(options, scope, token) : undefined))
          .catch(() => {});
        return answer(conflict(busyLockLeftMs as number));
      }
      claim = looked;
    } catch (error) {
      // The request's own deadline, met while claiming: its server adapter answers 504.
      if (context?.stopReason !== undefined) throw context.stopReason;
      // Run without idempotency, as asked; the host still reports why.
      if (options.failOpen) return { kind: 'pass', cause: error };
      return answer(storeUnavailable(), error);
    }
    switch (claim.kind) {
      case 'claimed':
        return {
          kind: 'run',
          request: new IdempotentRequest(scope, token, claim.secret, claim.steps, options as ResolvedOptions<unknown>),
        };
      case 'completed':
        return answer(replay(claim.response));
      case 'mismatch':
        return answer(reused());
      case 'busy': {
        busyLockLeftMs = claim.lockLeftMs;
        const waitable = (context?.remainingMs() ?? Number.POSITIVE_INFINITY) - ANSWER_MARGIN_MS;
        if (options.onBusy === 'reject' || waitable <= 0) return answer(conflict(claim.lockLeftMs));
        await changeOrTimeout(scope, Math.min(pollMs, claim.lockLeftMs, waitable), context);
        pollMs = Math.min(pollMs * 2, MAX_POLL_MS);
      }
    }
  }
}

/** `look`'s claim, or undefined once `ms` have passed without it (never with an infinite `ms`). */
function lookUntil<T>(look: Promise<T>, ms: number): Promise<T | undefined> {
  if (!Number.isFinite(ms)) return look;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, ms), undefined);
  });
  return Promise.race([look, late]).finally(() => clearTimeout(timer));
}

/** Gives back a key a look won after its request had answered: outside that request, under the store's budget. */
function releaseLate<Req>(options: ResolvedOptions<Req>, scope: string, token: string): Promise<void> {
  return outsideContext(() => runWithDeadline(options.storeTimeoutMs, () => options.store.release(scope, token)));
}

function answer(value: Answer, cause?: unknown): Admission {
  return { kind: 'answer', answer: value, cause };
}

/** The stored result as an answer, marked as a replay. */
function replay(response: StoredResponse): Answer {
  const headers = { ...response.headers, [REPLAYED_HEADER]: 'true' };
  if (response.body === undefined) return bodyNotStored(response.status, response.bodyBytes, headers);
  return { status: response.status, headers, body: response.body };
}
