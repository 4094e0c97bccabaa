/**
 * What Koa's error path sees of a deadline: nothing. A deadline error that escapes the routes (this hop's, a
 * downstream's 504, a call refused for lack of time) is answered as the deadline's own answer is — 504 with the JSON
 * body and `X-Deadline-Exceeded-By`, or 499 — and Koa's `ctx.onerror` does not hear of it, nor of what follows a
 * response this hop cut: Koa would emit each on `app.on('error')`, and its default listener prints the stack.
 */
import { ErrorCode, findDeadlineError } from '@deadline/core';
import { findErrorWithCode } from '@deadline/core/internal';
import type { RequestState } from '@deadline/server/internal';
import type { Context } from 'koa';

/**
 * The rest of the chain failed with `error`: a deadline error or a cancellation is answered (once), every other
 * error is thrown on to Koa as it was — a breaker's refusal that global fetch wrapped (`TypeError: fetch failed`)
 * bare, so that Koa answers its 503 and `Retry-After`, not a 500.
 * @internal
 */
export function answerDeadlineError(ctx: Context, state: RequestState, error: unknown): void {
  const typed = findDeadlineError(error);
  if (typed === undefined) throw findErrorWithCode(error, ErrorCode.CircuitOpen) ?? error;
  // The hop already answered for this request (its deadline passed): the routes' late failure, often our own abort
  // reaching them, says nothing new. Dropped quietly, as the late answer itself is.
  if (state.answeredWith !== undefined) return;
  state.recordError(typed);
  const res = ctx.res;
  if (res.headersSent) {
    // Half-sent: its client would wait for a body that will not come.
    if (!res.writableEnded) res.destroy(typed);
    return;
  }
  // The client left (or the socket is gone): nobody to answer.
  if (!ctx.writable) return;
  const answer = state.answerOf(typed);
  ctx.set(answer.headers);
  // The body first: Koa turns a status of a response without one into 204 when the body is set to null after it.
  ctx.body = answer.body ?? null;
  ctx.status = answer.statusCode;
  state.answeredWith = answer.statusCode;
}

/** What a cut response's stream or socket ends with. */
const CUT = new Set(['ERR_STREAM_PREMATURE_CLOSE', 'ERR_STREAM_DESTROYED', 'ECONNRESET', 'EPIPE']);

/** An app's context prototype (`app.context`) whose `onerror` is the one below. */
const QUIET = Symbol('deadline.quietKoaErrors');

type Prototype = Context & { [QUIET]?: true };

/**
 * Keeps the request's deadline errors, and the stream errors of a response this hop cut or its client left, out of
 * Koa's error path (`ctx.onerror`, which Koa also calls for what a streamed body's pipe ends with, after the
 * routes). Once per app: its `app.context`, every request's prototype, gets an `onerror` that passes every other
 * error to the one it had.
 * @internal
 */
export function quietKoaErrors(ctx: Context): void {
  const prototype = ctx.app.context as Prototype;
  if (prototype[QUIET] === true) return;
  const onerror = prototype.onerror;
  prototype.onerror = function onerrorUnlessDeadline(this: Context, error: Error) {
    // Koa calls it with null too (a response that finished well): passed on, as every other error.
    if (error != null && isDeadlines(this.deadline as RequestState | undefined, error)) return;
    return onerror.call(this, error);
  };
  prototype[QUIET] = true;
}

function isDeadlines(state: RequestState | undefined, error: Error): boolean {
  if (state === undefined) return false;
  if (findDeadlineError(error) !== undefined) return true;
  // This hop cut the response, or its client left: what the pipe or the socket ends with follows from that.
  const cut = state.outcome === 'deadline_exceeded' || state.outcome === 'cancelled';
  return cut && CUT.has((error as { code?: unknown }).code as string);
}
