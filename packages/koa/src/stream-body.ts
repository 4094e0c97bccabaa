/**
 * Koa writes a streamed body (`ctx.body = stream`) after the middleware are done, from outside them: the stream's
 * reads — an async generator behind `Readable.from()`, a cursor's next page — would run outside the request's
 * context, their calls unbounded. Reads of a body the routes left in the context are bound to it.
 */
import { AsyncResource } from 'node:async_hooks';
import type { RequestState } from '@deadline/server/internal';

type Readable = { _read?: unknown };

/**
 * Binds `body`'s reads, if it is a readable stream, to the request's context as the routes left it (narrowed by a
 * route's limits, or long-lived). @internal
 */
export function readInContext(body: unknown, state: RequestState): void {
  if (body === null || typeof body !== 'object') return;
  const read = (body as Readable)._read;
  if (typeof read !== 'function') return;
  (body as Readable)._read = state.context.run(bindToContext, read as (size: number) => void, body);
}

function bindToContext(read: (size: number) => void, body: object): (size: number) => void {
  return AsyncResource.bind(read, 'DeadlineStreamBody', body);
}
