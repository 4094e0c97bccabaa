/**
 * `handle(sub, handler)`: the iterator style (`for await (const msg of sub)`) with each message in its context. A
 * loop's body cannot be run inside a context — it runs where the loop is — so the loop is this function's, and the
 * body is the handler: it runs in the context of its message, as a callback would, `concurrency` at a time.
 */
import { InvalidArgumentError } from '@deadline/core';
import { checkFunction, checkNumber, checkObject } from '@deadline/core/internal';
import { deliver } from './deliver.js';
import type { NatsMsgLike, SubscriptionLike } from './nats-types.js';
import type { ResolvedNatsOptions } from './options.js';

/**
 * Options of {@link handle}.
 *
 * @example
 * ```ts
 * const options: HandleOptions = { concurrency: 8, onError: (error, msg) => log.error({ err: error, subject: msg.subject }) };
 * ```
 */
export interface HandleOptions {
  /** How many messages are handled at once; the next is read when one is done. Default 1: in order, as a `for await` loop. */
  concurrency?: number | undefined;
  /**
   * Told of a handler's error — one of its own, not a deadline (a deadline error is answered and logged here). The
   * loop goes on. Without it, the first such error ends the loop: `handle()` rejects with it, as a `for await` body
   * that throws does (the subscription is then unsubscribed).
   */
  onError?: ((error: unknown, msg: NatsMsgLike) => void) | undefined;
}

interface Iterated {
  subject: string;
  options: ResolvedNatsOptions;
}

const iterated = new WeakMap<object, Iterated>();

/** Notes that `sub` (made without a callback by a wrapped connection) is to be handled with its options. @internal */
export function rememberIterated(
  sub: SubscriptionLike,
  subject: string,
  options: ResolvedNatsOptions,
): SubscriptionLike {
  if (typeof sub === 'object' && sub !== null) iterated.set(sub, { subject, options });
  return sub;
}

/**
 * Reads a subscription (made without a callback by a {@link withDeadline} connection) to its end, running `handler`
 * for each message inside the message's context — re-anchored from its headers, less the time it spent on the way —
 * and never for one that arrived with no time left. A request is answered within its deadline or with the deadline
 * answer. Resolves once the subscription is over (unsubscribed, drained or closed) and every handler done.
 *
 * @example
 * ```ts
 * import { handle, withDeadline } from '@deadline/nats';
 * const bus = withDeadline(nc, { serviceName: 'inventory' });
 * await handle(bus.subscribe('stock.get', { queue: 'inventory' }), async (msg) => {
 *   const { rows } = await db.query('SELECT n FROM stock WHERE sku = $1', [msg.string()]);
 *   msg.respond(JSON.stringify(rows[0]));
 * }, { concurrency: 8 });
 * ```
 */
export async function handle(
  sub: AsyncIterable<NatsMsgLike>,
  handler: (msg: NatsMsgLike) => unknown,
  options?: HandleOptions,
): Promise<void> {
  const found = iterated.get(sub as object);
  if (found === undefined) {
    throw new InvalidArgumentError(
      'sub',
      'a subscription made without a callback by subscribe() of a connection wrapped with withDeadline()',
      sub,
    );
  }
  checkFunction('handler', handler, false);
  checkObject('options', options);
  const concurrency = checkNumber('concurrency', options?.concurrency, { min: 1, max: 1_000_000 }) ?? 1;
  const onError = checkFunction<(error: unknown, msg: NatsMsgLike) => void>('onError', options?.onError);
  const running = new Set<Promise<void>>();
  let failure: { error: unknown } | undefined;
  for await (const msg of sub) {
    const done = settled(() => deliver(msg, found.subject, found.options, handler)).then((error) => {
      running.delete(done);
      if (error === undefined) return;
      if (onError !== undefined) {
        try {
          onError(error.error, msg);
        } catch {
          // A broken error callback never breaks the loop.
        }
      } else failure ??= error;
    });
    running.add(done);
    if (running.size >= concurrency) await Promise.race(running);
    if (failure !== undefined) break;
  }
  await Promise.all(running);
  if (failure !== undefined) throw failure.error;
}

/** What `result` failed with, if anything (a deadline error was answered: not a failure here). */
async function settled(run: () => unknown): Promise<{ error: unknown } | undefined> {
  try {
    await run();
    return undefined;
  } catch (error) {
    return { error };
  }
}
