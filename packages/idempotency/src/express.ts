/**
 * The express middleware. Express has no hook between the handler and the socket, so the response is followed
 * through `res.write` and `res.end` of that one response: its chunks are kept (up to `maxBodyBytes`) and the result
 * is stored as the answer ends. Not before: holding `res.end` back would leave a window in which the deadline's
 * 504 goes out first. A retry that arrives before the write lands finds the key still held and waits for it (woken
 * at once in this process). A request cut at its deadline, or whose client went away, gives its key back when its
 * response closes.
 */
import { storage } from '@deadline/core/internal';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { admit } from './admission.js';
import type { IdempotentRequest } from './idempotent-request.js';
import { type IdempotencyOptions, resolveOptions } from './options.js';
import { sentBody } from './sent-body.js';

/**
 * Options of {@link idempotency}: `tenant` receives the express request.
 *
 * @example
 * ```ts
 * const options: ExpressIdempotencyOptions = { store: pgStore(pool), tenant: (req) => req.get('x-api-client') };
 * ```
 */
export type ExpressIdempotencyOptions = IdempotencyOptions<Request>;

/**
 * The express middleware: requests on `methods` (POST and PATCH) that carry an `Idempotency-Key` run once per
 * key; retries get the stored answer with `Idempotent-Replayed: true`. Use it after `@deadline/express`'s
 * middleware (its lock then follows each request's deadline) and after a body parser (the payload's fingerprint
 * is taken from `req.body`). Options are checked here, when the app is built.
 *
 * @example
 * ```ts
 * import express from 'express';
 * import { deadline } from '@deadline/express';
 * import { idempotency, redisStore, step } from '@deadline/idempotency';
 *
 * const app = express();
 * app.use(deadline({ serviceName: 'orders' }), express.json(), idempotency({ store: redisStore(redis) }));
 * app.post('/orders', async (req, res) => {
 *   const charge = await step('charge', () => payments.charge(req.body));
 *   res.status(201).json({ charge: charge.id });
 * });
 * ```
 */
export function idempotency(options: ExpressIdempotencyOptions): RequestHandler {
  const resolved = resolveOptions<Request>(options);
  return function idempotencyMiddleware(req: Request, res: Response, next: NextFunction): void {
    if (!resolved.methods.has(req.method)) {
      next();
      return;
    }
    const facts = {
      method: req.method,
      // Used on a route, its pattern; used for the whole app (before routing), the path.
      route: (req.route as { path?: unknown } | undefined)?.path?.toString() ?? `${req.baseUrl}${req.path}`,
      headers: req.headersDistinct,
      body: req.body as unknown,
    };
    const context = storage.getStore();
    admit(resolved, req, facts, context).then((admission) => {
      if (admission.cause !== undefined) {
        process.emitWarning(storeWarning(admission.cause), {
          type: 'DeadlineWarning',
          code: 'DEADLINE_IDEMPOTENCY_STORE',
        });
      }
      if (admission.kind === 'pass') {
        next();
        return;
      }
      if (admission.kind === 'answer') {
        res.status(admission.answer.status).set(admission.answer.headers).end(admission.answer.body);
        return;
      }
      const idempotent = admission.request;
      // Stopped: the answer going out is the deadline's (or the client left). Known, not asked: see _knownStopped.
      follow(res, idempotent, () => context?._knownStopped === true, resolved.maxBodyBytes);
      idempotent.context.run(() => next());
    }, next);
  };
}

function storeWarning(cause: unknown): string {
  return `idempotency store unavailable: ${cause instanceof Error ? cause.message : String(cause)}`;
}

type Chunk = string | Uint8Array;

/** Follows the response through its `write` and `end` to the request's `finish`. */
function follow(res: Response, idempotent: IdempotentRequest, stopped: () => boolean, maxBodyBytes: number): void {
  const write = res.write;
  const end = res.end;
  const chunks: Buffer[] = [];
  let size = 0;
  let ended = false;
  const keep = (chunk: unknown, encoding: unknown) => {
    if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
    const bytes =
      typeof chunk === 'string' ? Buffer.from(chunk, encoding as BufferEncoding) : Buffer.from(chunk as Uint8Array);
    size += bytes.length;
    if (size <= maxBodyBytes) chunks.push(bytes);
  };
  res.write = function idempotentWrite(this: Response, chunk: Chunk, ...rest: unknown[]) {
    if (!ended) keep(chunk, typeof rest[0] === 'string' ? rest[0] : undefined);
    return (write as (...args: unknown[]) => boolean).call(this, chunk, ...rest);
  } as Response['write'];
  res.end = function idempotentEnd(this: Response, ...args: unknown[]) {
    // Left in place (a middleware mounted after this one may have wrapped it), passing through once ended.
    if (ended) return (end as (...a: unknown[]) => Response).apply(this, args);
    ended = true;
    keep(args[0], typeof args[1] === 'string' ? args[1] : undefined);
    const body = size <= maxBodyBytes ? sentBody(Buffer.concat(chunks)) : { body: undefined, bodyBytes: size };
    void idempotent.finish({ status: res.statusCode, headers: res.getHeaders(), ...body }, stopped());
    return (end as (...a: unknown[]) => Response).apply(this, args);
  } as Response['end'];
  // Cut at the deadline (a 504 written by @deadline/express), or the client left: the key is given back.
  res.once('close', () => void idempotent.finish(undefined, true));
}
