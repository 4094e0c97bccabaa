/**
 * Once the plugin answered for a request (its 504), or its client left, the handler often still finishes: it returns,
 * calls `reply.send()`, or rejects because the abort reached the call it was waiting on. fastify would log a warning
 * (`FST_ERR_REP_ALREADY_SENT`) and an error (`Promise errored, but reply.sent = true was set`) for these; they say
 * nothing new, so that reply's logger drops exactly those two: the warning always, the error when it is the abort's
 * echo — a deadline error or a cancellation (`findDeadlineError`: a driver's error the adapter marked too), or an
 * abort error (`AbortError` of a signal, undici's `UND_ERR_ABORTED`). A genuine bug of the handler's is still logged.
 */
import { findDeadlineError } from '@deadline/core';
import type { FastifyBaseLogger, FastifyReply } from 'fastify';

const ALREADY_SENT = 'FST_ERR_REP_ALREADY_SENT';
const PROMISE_ERRORED_AFTER_SEND = 'Promise errored, but reply.sent = true was set';
/** How deep to look for an abort in a chain of causes. */
const MAX_CAUSE_DEPTH = 5;

/**
 * Replaces the reply's logger with one that drops the two late lines. The child shares the parent's prototype chain,
 * as pino's children do.
 *
 * @example
 * ```ts
 * quietLateReplies(reply);
 * reply.hijack();
 * ```
 */
export function quietLateReplies(reply: FastifyReply): void {
  const log = reply.log;
  const quiet: FastifyBaseLogger = Object.create(log);
  quiet.warn = function warn(this: FastifyBaseLogger, ...args: unknown[]) {
    const first = args[0] as { err?: { code?: unknown } } | undefined;
    if (first?.err?.code === ALREADY_SENT) return;
    return (log.warn as (...a: unknown[]) => void).apply(log, args);
  } as FastifyBaseLogger['warn'];
  quiet.error = function error(this: FastifyBaseLogger, ...args: unknown[]) {
    const first = args[0] as { err?: unknown } | undefined;
    if (args[1] === PROMISE_ERRORED_AFTER_SEND && isAbortEcho(first?.err)) return;
    return (log.error as (...a: unknown[]) => void).apply(log, args);
  } as FastifyBaseLogger['error'];
  reply.log = quiet;
}

function isAbortEcho(error: unknown): boolean {
  if (findDeadlineError(error) !== undefined) return true;
  let current = error;
  for (let depth = 0; depth < MAX_CAUSE_DEPTH && typeof current === 'object' && current !== null; depth++) {
    const { name, code, cause } = current as { name?: unknown; code?: unknown; cause?: unknown };
    if (name === 'AbortError' || code === 'ABORT_ERR' || code === 'UND_ERR_ABORTED') return true;
    current = cause;
  }
  return false;
}
