/**
 * A service implementation whose handlers each run in the deadline context of their call. grpc-js gives a server
 * interceptor no way to run the handler inside AsyncLocalStorage's `run()` (an `enterWith()` in its `start` does
 * not reach the handler), so the handlers themselves are wrapped, one per method of the service's definition.
 */

import type { EventEmitter } from 'node:events';
import { type ResolvedIncomingOptions, type RpcServerOptions, resolveIncomingOptions } from '@deadline/core/internal';
import { type BudgetParser, createBudgetParser } from '@deadline/core/wire';
import {
  type Metadata,
  type ServerErrorResponse,
  type ServiceDefinition,
  status as Status,
  type sendUnaryData,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import type { GrpcServerCall } from './grpc-types.js';
import { startCall } from './incoming-call.js';
import { codeOf, shedStatus, toGrpcStatus } from './status.js';

/**
 * Options of {@link deadlineService}: the core's options of an RPC server, its `trust` and `admission.exempt`
 * predicates shown the grpc-js server call.
 *
 * @example
 * ```ts
 * const options: GrpcServerDeadlineOptions = { serviceName: 'inventory', defaultMs: 2_000, maxMs: 10_000 };
 * server.addService(InventoryService, deadlineService(InventoryService, implementation, options));
 * ```
 */
export type GrpcServerDeadlineOptions = RpcServerOptions<GrpcServerCall>;

type Handler = (call: GrpcServerCall, callback?: Answer) => unknown;
/** grpc-js's `sendUnaryData`, taking any error: ours are answered with their status. */
type Answer = (error: unknown, value?: unknown, trailer?: Metadata, flags?: number) => void;
type Method = ServiceDefinition[string];

/**
 * Wraps a service implementation so that each call's handler runs in a deadline context built from the call: its
 * deadline (`grpc-timeout`) and any budget metadata (`x-request-deadline`, …), the smallest winning, `defaultMs` when
 * none came; any caller may shorten `defaultMs`, only one `trust` accepts lengthen it, up to `maxMs`. A call with no
 * time left (a `grpc-timeout` of 0) is refused before the handler runs. The context is cancelled when the caller
 * cancels; when its deadline passes first — the caller's own, 20 ms before grpc-js's timer would answer without the
 * trailer, or a clamped one — the call is answered `DEADLINE_EXCEEDED` naming this hop in the
 * `x-deadline-exceeded-by` trailer, and the work the handler started (queries, calls) is stopped with a
 * `DeadlineExceededError`. A streaming call is bounded as a whole. An error that is one of ours (or explained by one)
 * is answered with its gRPC status ({@link toGrpcStatus}). With `admission`, a unary call that cannot finish is
 * refused before its handler runs: `UNAVAILABLE` with `grpc-retry-pushback-ms` when the server is overloaded.
 *
 * @example
 * ```ts
 * import { Server } from '@grpc/grpc-js';
 * import { deadlineService } from '@deadline/grpc';
 * const server = new Server();
 * server.addService(InventoryService, deadlineService(InventoryService, {
 *   reserve: async (call, callback) => {
 *     try { callback(null, await db.query('select …', [call.request.sku])); } // bounded by the call's deadline
 *     catch (err) { callback(err as Error); }
 *   },
 * }, { serviceName: 'inventory', maxMs: 10_000 }));
 * ```
 */
export function deadlineService<Implementation extends object = UntypedServiceImplementation>(
  definition: ServiceDefinition,
  implementation: Implementation,
  options?: GrpcServerDeadlineOptions,
): Implementation {
  const resolved = resolveIncomingOptions(options);
  const parser = createBudgetParser({ dialects: resolved.dialects });
  const wrapped: Record<string, unknown> = { ...(implementation as Record<string, unknown>) };
  for (const [name, method] of Object.entries(definition)) {
    // grpc-js finds a handler under the method's name or its original (proto) name: wrap whichever is there.
    const key = name in implementation ? name : method.originalName;
    const handler = key === undefined ? undefined : (implementation as Record<string, unknown>)[key];
    if (key === undefined || typeof handler !== 'function') continue;
    wrapped[key] = method.responseStream
      ? streamingHandler(handler as Handler, method, resolved, parser)
      : answeringHandler(handler as Handler, method, resolved, parser);
  }
  return wrapped as Implementation;
}

/** Unary and client-streaming handlers: the call ends when the callback answers (the first answer wins). */
function answeringHandler(
  handler: Handler,
  method: Method,
  options: ResolvedIncomingOptions<GrpcServerCall>,
  parser: BudgetParser,
) {
  return function withDeadline(call: GrpcServerCall, callback: sendUnaryData<unknown>): void {
    const incoming = startCall(call, method, options, parser);
    const answer: Answer = (error, value, trailer, flags) => {
      if (incoming.ended) return;
      if (error === null || error === undefined) {
        incoming.end(Status.OK);
        callback(null, value, trailer, flags);
        return;
      }
      const status = toGrpcStatus(error, options.hop);
      incoming.end(status?.code ?? codeIn(error), error);
      callback((status ?? error) as ServerErrorResponse, value, trailer, flags);
    };
    if (incoming.refusal !== undefined) {
      answer(incoming.refusal);
      return;
    }
    if (incoming.shed !== undefined) {
      const status = shedStatus(incoming.shed, options.hop);
      incoming.end(status.code);
      callback(status as ServerErrorResponse);
      return;
    }
    incoming.onStop((reason) => answer(reason));
    try {
      incoming.context.run(handler, call, answer);
    } catch (error) {
      answer(error);
    }
  };
}

/** Server-streaming and bidi handlers: the call ends when the stream's status goes out; its deadline bounds it all. */
function streamingHandler(
  handler: Handler,
  method: Method,
  options: ResolvedIncomingOptions<GrpcServerCall>,
  parser: BudgetParser,
) {
  return function withDeadline(call: GrpcServerCall): void {
    const incoming = startCall(call, method, options, parser);
    const stream = call as EventEmitter & { pendingStatus?: { code?: number } };
    let failure: unknown;
    const fail = (error: unknown) => {
      if (incoming.ended || failure !== undefined) return;
      failure = error;
      // The stream's own way to end with a status: grpc-js sends it once what was written has gone.
      stream.emit('error', toGrpcStatus(error, options.hop) ?? error);
    };
    stream.once('finish', () => {
      const code = stream.pendingStatus?.code ?? Status.OK;
      incoming.end(code, failure ?? (code === Status.OK ? undefined : stream.pendingStatus));
    });
    stream.once('cancelled', () => {
      const reason = incoming.context.stopReason;
      incoming.end(reason === undefined ? Status.CANCELLED : codeOf(reason), reason);
    });
    if (incoming.refusal !== undefined) {
      fail(incoming.refusal);
      return;
    }
    incoming.onStop(fail);
    try {
      incoming.context.run(handler, call);
    } catch (error) {
      fail(error);
    }
  };
}

function codeIn(error: unknown): number {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'number' && Number.isInteger(code) ? code : Status.UNKNOWN;
}
