/**
 * A message a Nest microservice received, read as the core's `IncomingCall`: the budget its caller sent, found where
 * each transport carries it, and the message's own way of saying its caller left. Read by shape, not by class, so
 * that the app's `@nestjs/microservices` (11 or 12), and whichever transports it installed, are the only ones loaded:
 *
 * - gRPC: the call's deadline (`grpc-timeout`, which grpc-js answers by itself when it passes) and its metadata;
 *   `'cancelled'` when the caller resets the call.
 * - NATS: the message's headers (`NatsContext.getHeaders()`).
 * - RabbitMQ: the message's AMQP headers (`RmqContext.getMessage().properties.headers`).
 * - Redis and TCP: the packet's metadata (`getMetadata()`, NestJS 12; the Redis transport has no headers).
 * - Anything else (MQTT, Kafka, the Redis and TCP transports of NestJS 11): no budget arrives; `defaultMs` applies.
 */
import type { EventEmitter } from 'node:events';
import { CancelledError, DeadlineExceededError, ErrorCode, findDeadlineError } from '@deadline/core';
import { findErrorWithCode, IncomingCall, type ResolvedIncomingOptions, tableHeaders } from '@deadline/core/internal';
import { type BudgetParser, DEADLINE_EXCEEDED_BY_HEADER as EXCEEDED_BY, type HeaderSource } from '@deadline/core/wire';
import type { ExecutionContext } from '@nestjs/common';

/**
 * How much earlier than grpc-js's own deadline timer the handler's deadline falls, in ms: the answer naming this hop
 * must go before grpc-js answers without it (docs/guides/grpc.md; `@deadline/grpc` measured the same lead).
 */
const GRPC_JS_TIMER_LEAD_MS = 20;

/** A grpc-js server call, as Nest hands it to a handler (its third argument). */
interface GrpcCall extends EventEmitter {
  getDeadline(): Date | number;
  getPath?(): string;
}

/** grpc-js's `Metadata`, as read here. */
interface GrpcMetadata {
  get(name: string): unknown[];
}

/** NATS's `MsgHdrs`, as read here (`get()` answers '' for a header it has not). */
interface NatsHeaders {
  get(name: string): string;
  keys?(): string[];
}

/** Header sources that find nothing: a transport with nowhere to carry a budget. */
const NO_HEADERS: HeaderSource = { get: () => undefined };

/** A message's transport, as the call's line names it, and where its caller's budget is read. */
interface Carrier {
  protocol: string;
  method: string;
  headers: HeaderSource;
  ownMs: number;
  /** A broker's message (NATS, RabbitMQ): the time it waited in the queue is taken off its budget. */
  kind?: 'message';
  leadMs?: number;
  grpcCall?: GrpcCall;
}

/** Starts the call of the message `context` is about: its budget read, its context made (and refused if spent). */
export function startRpcCall(
  context: ExecutionContext,
  options: ResolvedIncomingOptions<ExecutionContext>,
  parser: BudgetParser,
): IncomingCall<ExecutionContext> {
  const carrier = carrierOf(context);
  const incoming = new IncomingCall<ExecutionContext>({ call: context, ...carrier }, options, parser);
  // The caller reset the stream, or grpc-js's own deadline timer answered the call: grpc-js says 'cancelled' for both.
  carrier.grpcCall?.once('cancelled', () => incoming.callerLeft());
  return incoming;
}

/** Whether `context` is a gRPC call's (the answer is then a gRPC status). */
export function grpcCallOf(context: { getArgs(): unknown[] }): GrpcCall | undefined {
  const call = context.getArgs()[2] as Partial<GrpcCall> | undefined;
  return typeof call?.getDeadline === 'function' && typeof call.once === 'function' ? (call as GrpcCall) : undefined;
}

function carrierOf(context: ExecutionContext): Carrier {
  const grpcCall = grpcCallOf(context);
  if (grpcCall !== undefined) {
    const metadata = context.getArgs()[1] as GrpcMetadata;
    return {
      protocol: 'grpc',
      method: grpcCall.getPath?.() ?? patternOf(context),
      headers: { get: (name) => stringOrNone(metadata.get(name)[0]) },
      ownMs: msUntil(grpcCall.getDeadline()),
      leadMs: GRPC_JS_TIMER_LEAD_MS,
      grpcCall,
    };
  }
  const method = patternOf(context);
  const transport = context.switchToRpc().getContext<Record<string, unknown> | undefined>();
  const unbounded = Number.POSITIVE_INFINITY;
  if (typeof transport?.getHeaders === 'function') {
    const headers = (transport.getHeaders as () => NatsHeaders | undefined)();
    const source = headers === undefined ? NO_HEADERS : byGet(headers);
    return { protocol: 'nats', kind: 'message', method, headers: source, ownMs: unbounded };
  }
  if (typeof transport?.getMessage === 'function') {
    // RabbitMQ: an amqplib message; its AMQP headers are a table of any values.
    const message = (transport.getMessage as () => { properties?: { headers?: Record<string, unknown> } })();
    const headers = tableHeaders(message?.properties?.headers);
    return { protocol: 'amqp', kind: 'message', method, headers, ownMs: unbounded };
  }
  if (typeof transport?.getMetadata === 'function') {
    const protocol = typeof transport.getChannel === 'function' ? 'redis' : 'tcp';
    return { protocol, method, headers: tableHeaders((transport.getMetadata as () => unknown)()), ownMs: unbounded };
  }
  return { protocol: 'rpc', method, headers: NO_HEADERS, ownMs: unbounded };
}

/** The handler's message pattern, as its line names it: `Class.method` when the transport gives none. */
function patternOf(context: ExecutionContext): string {
  const transport = context.switchToRpc().getContext<Record<string, unknown> | undefined>();
  for (const name of ['getPattern', 'getSubject', 'getChannel', 'getTopic']) {
    const read = transport?.[name];
    if (typeof read === 'function') {
      const pattern = (read as () => unknown).call(transport);
      if (typeof pattern === 'string') return pattern;
    }
  }
  return `${context.getClass().name}.${context.getHandler().name}`;
}

/** NATS headers by name, any case (their `get()` matches case exactly by default, in both NATS libraries). */
function byGet(headers: NatsHeaders): HeaderSource {
  return {
    get(name) {
      const exact = stringOrNone(headers.get(name));
      if (exact !== undefined) return exact;
      for (const key of headers.keys?.() ?? []) if (key.toLowerCase() === name) return stringOrNone(headers.get(key));
      return undefined;
    },
  };
}

/** A header's value when it is one a parser can read: hostile or binary values are no value. */
function stringOrNone(value: unknown): string | undefined {
  if (typeof value === 'string') return value === '' ? undefined : value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return undefined;
}

/** ms from now until a grpc-js deadline (`Infinity`: none). */
function msUntil(deadline: Date | number): number {
  const at = deadline instanceof Date ? deadline.getTime() : deadline;
  return Number.isFinite(at) ? at - Date.now() : Number.POSITIVE_INFINITY;
}

/** gRPC's status codes used here (grpc-js's `status`, not imported: the app may not use gRPC). */
const GrpcStatus = { OK: 0, CANCELLED: 1, UNKNOWN: 2, DEADLINE_EXCEEDED: 4, UNAVAILABLE: 14 } as const;

/**
 * Ends the message's call (its line written once) with what its transport answers: a gRPC status, or for the other
 * transports the error's code (`ERR_DEADLINE_EXCEEDED`, …), `error`, or `ok`.
 */
export function endRpcCall(incoming: IncomingCall<ExecutionContext>, context: ExecutionContext, error?: unknown): void {
  if (incoming.ended) return;
  const typed = error === undefined ? undefined : (findDeadlineError(error) ?? error);
  if (grpcCallOf(context) !== undefined) {
    incoming.end(typed === undefined ? GrpcStatus.OK : grpcStatusOf(typed), error);
    return;
  }
  const code = (typed as { code?: unknown } | undefined)?.code;
  incoming.end(typed === undefined ? 'ok' : typeof code === 'string' ? code : 'error', error);
}

function grpcStatusOf(error: unknown): number {
  if (error instanceof DeadlineExceededError) return GrpcStatus.DEADLINE_EXCEEDED;
  if (error instanceof CancelledError) return GrpcStatus.CANCELLED;
  if (findErrorWithCode(error, ErrorCode.CircuitOpen) !== undefined) return GrpcStatus.UNAVAILABLE;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'number' ? code : GrpcStatus.UNKNOWN;
}

/**
 * What a deadline error or cancellation is answered with on a microservice's transport, shaped as Nest's RPC layer
 * sends an `RpcException`: for gRPC a status (`DEADLINE_EXCEEDED` or `CANCELLED`) with `x-deadline-exceeded-by` in its
 * trailers; for the other transports an error object the client's observable receives — `{ status: 'error',
 * message, code, exceededBy }` — which `withDeadline()`'s clients turn back into the typed error.
 */
export function rpcAnswerOf(error: DeadlineExceededError | CancelledError, host: { getArgs(): unknown[] }): object {
  const exceededBy = error instanceof DeadlineExceededError ? error.hop : undefined;
  if (grpcCallOf(host) !== undefined) {
    // The call's own Metadata class: grpc-js checks the trailers it sends are one.
    const Metadata = (host.getArgs()[1] as object).constructor as new () => { set(name: string, value: string): void };
    const metadata = new Metadata();
    if (exceededBy !== undefined) metadata.set(EXCEEDED_BY, exceededBy);
    return { code: grpcStatusOf(error), details: error.message, metadata };
  }
  return {
    status: 'error',
    message: error.message,
    code: error.code,
    ...(exceededBy === undefined ? {} : { exceededBy }),
  };
}
