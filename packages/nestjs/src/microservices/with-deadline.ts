/**
 * A Nest microservice client (`ClientProxy`) whose messages follow the request's deadline: `send()` carries the
 * remaining budget and the trace to the server, is not made when too little is left, and gives up waiting — with a
 * `DeadlineExceededError` — when the request's time runs out; `emit()` carries the trace only (an event outlives the
 * request that sent it, as a job does).
 */
import { ErrorCode, InvalidArgumentError } from '@deadline/core';
import {
  OutgoingCall,
  type OutgoingCallOptions,
  type OutgoingLimits,
  openTelemetryPropagates,
  type ResolvedOutgoingLimits,
  resolveOutgoingLimits,
  type Scope,
  storage,
} from '@deadline/core/internal';
import { formatTraceparent } from '@deadline/core/wire';
import { ClientGrpcProxy, type ClientProxy } from '@nestjs/microservices';
import { Observable } from 'rxjs';
import { carry } from './carriers.js';

/**
 * Options of {@link withDeadline}.
 *
 * @example
 * ```ts
 * const options: MessageClientOptions = { marginMs: 20, minMs: 5 };
 * ```
 */
export interface MessageClientOptions {
  /** Kept back from the remaining time for the answer's way back, in ms: the message gets remaining − marginMs. Default 0. */
  marginMs?: number | undefined;
  /** Below this many ms left, the message is not sent: `DeadlineExceededError` at once. Default 1. */
  minMs?: number | undefined;
  /** How long a `send()` outside any deadline context may wait, in ms. Default: unbounded, as Nest's own. */
  defaultMs?: number | undefined;
  /** A circuit breaker (`@deadline/resilience`) that may refuse a message before it is sent. */
  circuitBreaker?: OutgoingLimits['circuitBreaker'];
}

/**
 * What {@link withDeadline} bounds: a `ClientProxy` of any transport but gRPC, whatever its events map.
 *
 * @example
 * ```ts
 * const client: MessageClient = ClientProxyFactory.create({ transport: Transport.RMQ, options: { urls, queue } });
 * ```
 */
export type MessageClient = Pick<ClientProxy, 'send' | 'emit'>;

interface Bounded {
  limits: ResolvedOutgoingLimits;
  /** Each call's options: the budget written in the message's headers, not in a transport header of its own. */
  callOptions: OutgoingCallOptions;
}

const bounded = new WeakMap<object, Bounded>();

/**
 * Bounds `client` in place and returns it: inside a deadline context each `send()` carries `x-request-deadline`
 * (remaining − `marginMs`) and `traceparent` where its transport carries headers (NATS, RabbitMQ — with the message's
 * `expiration` —, and Redis and TCP on NestJS 12), is refused before anything is sent when less than `minMs` is left,
 * and ends with a `DeadlineExceededError` at the deadline (the late reply is then dropped by Nest). A server's deadline
 * answer (`@deadline/nestjs` on the other side) comes back as a `DeadlineExceededError` naming that hop. `emit()`
 * carries the trace only. Outside a context nothing changes (but for `defaultMs`). A second call changes the options.
 * For gRPC, give the client's `channelOptions` to `withDeadline()` of `@deadline/grpc` instead.
 *
 * @example
 * ```ts
 * import { withDeadline } from '@deadline/nestjs/microservices';
 * const client = withDeadline(ClientProxyFactory.create({ transport: Transport.NATS, options: { servers } }));
 * // inside a request: the reply is awaited no longer than the request's remaining time
 * const stock = await firstValueFrom(client.send('stock.get', { sku: 'A1' }));
 * ```
 */
export function withDeadline<Client extends MessageClient>(client: Client, options?: MessageClientOptions): Client {
  if (client instanceof ClientGrpcProxy) {
    throw new InvalidArgumentError(
      'client',
      "a message transport's ClientProxy (for gRPC, wrap channelOptions with withDeadline() of @deadline/grpc)",
      client,
    );
  }
  if (typeof (client as Partial<ClientProxy> | undefined)?.send !== 'function') {
    throw new InvalidArgumentError('client', 'a ClientProxy of @nestjs/microservices', client);
  }
  const limits = resolveOutgoingLimits(options);
  const state: Bounded = { limits, callOptions: { ...limits.callOptions, propagates: true } };
  const patched = bounded.has(client);
  bounded.set(client, state);
  if (!patched) patch(client);
  return client;
}

function patch(client: MessageClient): void {
  const send = client.send;
  const emit = client.emit;
  Object.defineProperty(client, 'send', {
    configurable: true,
    writable: true,
    value: function sendWithDeadline(this: MessageClient, pattern: unknown, data: unknown) {
      const state = bounded.get(client) as Bounded;
      const scope = storage.getStore();
      const { defaultMs, guard } = state.limits;
      if (scope === undefined && defaultMs === undefined && guard === undefined) return send.call(this, pattern, data);
      return boundedSend(this, send, pattern, data, state, scope);
    },
  });
  Object.defineProperty(client, 'emit', {
    configurable: true,
    writable: true,
    value: function emitWithTrace(this: MessageClient, pattern: unknown, data: unknown) {
      const headers = traceHeadersOf(storage.getStore());
      if (headers === undefined) return emit.call(this, pattern, data);
      return emit.call(this, pattern, carry(this, data, { headers, timeoutMs: undefined }));
    },
  });
}

function boundedSend(
  client: MessageClient,
  send: ClientProxy['send'],
  pattern: unknown,
  data: unknown,
  state: Bounded,
  scope: Scope | undefined,
): Observable<unknown> {
  return new Observable((subscriber) => {
    let call: OutgoingCall;
    try {
      call = OutgoingCall.start(targetOf(pattern), state.callOptions, state.limits.guard, scope);
    } catch (refusal) {
      // Not sent: no time left, the request stopped, or the breaker refused.
      subscriber.error(refusal);
      return;
    }
    const offStop = call.onStop((reason) => {
      call.end(reason);
      subscriber.error(reason);
    });
    const carried = carry(client, data, { headers: call.headers, timeoutMs: call.timeoutMs });
    const reply = send.call(client, pattern, carried).subscribe({
      next: (value) => subscriber.next(value),
      error: (error: unknown) => {
        const typed = fromServer(call, error);
        call.end(typed);
        subscriber.error(typed);
      },
      complete: () => {
        call.end();
        subscriber.complete();
      },
    });
    return () => {
      offStop();
      reply.unsubscribe();
      // Unsubscribed before an answer (the app's own timeout, a takeUntil): the call is over, not failed.
      call.end();
    };
  });
}

/** A server's deadline answer (`@deadline/nestjs`'s, `{ code, exceededBy }`) as the error it stands for. */
function fromServer(call: OutgoingCall, error: unknown): unknown {
  const answer = error as { code?: unknown; exceededBy?: unknown } | null;
  if (answer !== null && typeof answer === 'object' && answer.code === ErrorCode.DeadlineExceeded) {
    if (typeof answer.exceededBy === 'string') return call.downstreamExceeded(answer.exceededBy);
  }
  return error;
}

/** The trace headers an event carries (none without a trace, or when OpenTelemetry propagates it). */
function traceHeadersOf(scope: Scope | undefined): Record<string, string> | undefined {
  const trace = scope?.trace;
  if (trace === undefined || openTelemetryPropagates()) return undefined;
  const headers: Record<string, string> = { traceparent: formatTraceparent(trace) };
  if (trace.tracestate !== undefined) headers.tracestate = trace.tracestate;
  return headers;
}

/** A message pattern as the call's target: a string as is, an object pattern as Nest writes it (JSON). */
function targetOf(pattern: unknown): string {
  if (typeof pattern === 'string') return pattern;
  try {
    return JSON.stringify(pattern) ?? String(pattern);
  } catch {
    return String(pattern);
  }
}
