/**
 * The server side: an interceptor that runs each call's handler in the deadline context of its call. Connect's
 * interceptors wrap the handler's invocation, so running `next()` inside the context puts the handler in it; a
 * streaming response is read message by message inside it too, since a generator's body runs where it is resumed.
 */

import { Code, ConnectError, type Interceptor, type StreamRequest, type UnaryRequest } from '@connectrpc/connect';
import {
  IncomingCall,
  type ResolvedIncomingOptions,
  type RpcServerOptions,
  resolveIncomingOptions,
  untilStopped,
} from '@deadline/core/internal';
import { createBudgetParser } from '@deadline/core/wire';
import { shedError, toConnectError } from './errors.js';
import { abortMeaning } from './protocol-deadline.js';

/**
 * What a Connect handler's call is, as the {@link ConnectServerDeadlineOptions} `trust` predicate sees it.
 *
 * @example
 * ```ts
 * const trust = (req: ConnectRequest) => req.header.get('x-internal') === '1';
 * ```
 */
export type ConnectRequest = UnaryRequest | StreamRequest;

/**
 * Options of {@link deadlineInterceptor}: the core's options of an RPC server, its `trust` and `admission.exempt`
 * predicates shown the request.
 *
 * @example
 * ```ts
 * const options: ConnectServerDeadlineOptions = { serviceName: 'inventory', defaultMs: 2_000, maxMs: 10_000 };
 * ```
 */
export type ConnectServerDeadlineOptions = RpcServerOptions<ConnectRequest>;

/**
 * A server interceptor that runs each handler in a deadline context built from its call: the timeout Connect
 * read (`grpc-timeout`, `Connect-Timeout-Ms`) and any budget header (`x-request-deadline`, …), the smallest winning,
 * `defaultMs` when none came; any caller may shorten `defaultMs`, only one `trust` accepts lengthen it, up to `maxMs`.
 * A timeout of 0 is refused before the handler runs. The handler's `ctx.signal` is the context's: it aborts when the
 * caller cancels and when the deadline passes — the caller's own (Connect's timer aborting its signal is that, not
 * the caller leaving) or a clamped one — then the call is answered `deadline_exceeded`, naming this hop in the
 * `x-deadline-exceeded-by` metadata, and the work the handler started (queries, calls) is stopped. A streaming
 * response is bounded as a whole. An error that is one of ours (or explained by one) is answered with its code
 * ({@link toConnectError}). With `admission`, a unary call that cannot finish is refused before its handler runs:
 * `unavailable` (HTTP 503 in the Connect protocol) with `Retry-After` when the server is overloaded. Put it first in
 * `interceptors`, so the others run in the context too, and are spared what admission refuses.
 *
 * @example
 * ```ts
 * import http2 from 'node:http2';
 * import { connectNodeAdapter } from '@connectrpc/connect-node';
 * import { deadlineInterceptor } from '@deadline/connect';
 * http2.createServer(connectNodeAdapter({
 *   routes: (router) => router.service(InventoryService, implementation),
 *   interceptors: [deadlineInterceptor({ serviceName: 'inventory', maxMs: 10_000 })],
 * })).listen(8080);
 * ```
 */
export function deadlineInterceptor(options?: ConnectServerDeadlineOptions): Interceptor {
  const resolved = resolveIncomingOptions(options);
  const parser = createBudgetParser({ dialects: resolved.dialects });
  return (next) => async (req) => {
    const incoming = new IncomingCall(
      {
        call: req,
        method: `/${req.service.typeName}/${req.method.name}`,
        protocol: 'connect',
        headers: req.header,
        // Connect's own timeout is in the headers, which the budget parser reads (grpc and connect dialects).
        ownMs: Number.POSITIVE_INFINITY,
        streaming: req.stream,
        // Aborted when the caller leaves, and by Connect's own timer for the caller's deadline.
        signal: req.signal,
        abortMeans: abortMeaning(req.header),
      },
      resolved,
      parser,
    );
    if (incoming.refusal !== undefined) throw answered(incoming, incoming.refusal, resolved);
    if (incoming.shed !== undefined) throw answered(incoming, shedError(incoming.shed, resolved.hop), resolved);
    const context = incoming.context;
    let response: Awaited<ReturnType<typeof next>>;
    try {
      response = await untilStopped(incoming, () =>
        context.run(next, { ...req, signal: context.signal ?? req.signal }),
      );
    } catch (error) {
      throw answered(incoming, error, resolved);
    }
    if (!response.stream) {
      incoming.end('ok');
      return response;
    }
    return { ...response, message: bounded(response.message, incoming, resolved) };
  };
}

/** Ends the call with `error` and returns what to throw: its Connect error when it is one of ours. */
function answered(
  incoming: IncomingCall<ConnectRequest>,
  error: unknown,
  options: ResolvedIncomingOptions<ConnectRequest>,
): unknown {
  const mapped = toConnectError(error, options.hop);
  const code = mapped?.code ?? (error instanceof ConnectError ? error.code : Code.Unknown);
  incoming.end(Code[code] ?? code, error);
  return mapped ?? error;
}

/** The handler's messages, each read inside its context and no later than its deadline; the call ends with them. */
async function* bounded<T>(
  messages: AsyncIterable<T>,
  incoming: IncomingCall<ConnectRequest>,
  options: ResolvedIncomingOptions<ConnectRequest>,
): AsyncGenerator<T> {
  const iterator = messages[Symbol.asyncIterator]();
  let done = false;
  try {
    for (;;) {
      const result = await untilStopped(incoming, () => incoming.context.run(() => iterator.next()));
      if (result.done === true) break;
      yield result.value;
    }
    done = true;
    incoming.end('ok');
  } catch (error) {
    done = true;
    // The context may have stopped between two reads, the next one then not started: the handler's generator, still
    // at its `yield`, is told to finish so that its own cleanup runs (a generator that threw is finished already).
    incoming.context.run(() => iterator.return?.())?.catch(() => {});
    throw answered(incoming, error, options);
  } finally {
    if (!done) {
      // The protocol stopped reading (the caller went): the handler's generator is told to finish, and its context
      // stops the work it was waiting on.
      incoming.end(Code[Code.Canceled] ?? Code.Canceled, incoming.context.stopReason);
      iterator.return?.().catch(() => {});
    }
  }
}
