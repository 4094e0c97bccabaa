/**
 * `node:diagnostics_channel` events, so that loggers and APMs can follow deadlines without this package
 * knowing about them. Publishing is free when nobody subscribes: every publish checks `hasSubscribers` first
 * and builds no message otherwise.
 */
import diagnostics from 'node:diagnostics_channel';
import type { CancelledError, DeadlineExceededError } from './errors.js';
import type { DeadlineContext, StopReason } from './scope.js';

/**
 * Names of the channels this project publishes on. Subscribe with `diagnostics_channel.subscribe(name, fn)`.
 *
 * @example
 * ```ts
 * import diagnostics from 'node:diagnostics_channel';
 * diagnostics.subscribe(DiagnosticsChannel.Exceeded, (message) => {
 *   const { error } = message as ExceededMessage;
 *   log.warn({ phase: error.phase, target: error.target }, error.message);
 * });
 * ```
 */
export const DiagnosticsChannel = {
  /** A context was created (a request arrived, `runWithDeadline` was called). Message: {@link ContextStartMessage}. */
  ContextStart: 'deadline:context:start',
  /** A context ended (its owner finished). Message: {@link ContextEndMessage}. */
  ContextEnd: 'deadline:context:end',
  /**
   * A deadline was found exceeded. `error.phase` says what happened: `in-handler` — a context ran out;
   * `before-call` — a call was refused for lack of time; `during-call` — a call was cut off (by an adapter).
   * Message: {@link ExceededMessage}.
   */
  Exceeded: 'deadline:exceeded',
  /** A context was cancelled (client gone, explicit cancel, by its parent); not published for a normal end. Message: {@link CancelledMessage}. */
  Cancelled: 'deadline:cancelled',
  /** A budget was written onto an outgoing call's headers. Message: {@link PropagateMessage}. */
  Propagate: 'deadline:propagate',
  /** An outgoing call is about to be made. Message: {@link CallStartMessage}. */
  CallStart: 'deadline:call:start',
  /** An outgoing call finished, failed or was cut off. Message: {@link CallEndMessage}. */
  CallEnd: 'deadline:call:end',
  /**
   * An outgoing call ended after the owner of its context was done (a response sent while the handler left the
   * call running, unawaited): once per such call, after its `deadline:call:end`. Message:
   * {@link CallOutlivedMessage}.
   */
  CallOutlived: 'deadline:call:outlived',
  /**
   * A message was dropped for lack of time: a consumer received one whose budget was gone (`expired`, its handler
   * not run), a reply came after its caller stopped waiting (`late-reply`), or a handler's answer came after its
   * deadline and was not sent (`late-answer`). Message: {@link MessageDroppedMessage}.
   */
  MessageDropped: 'deadline:message:dropped',
  /**
   * A server refused a request at arrival, before any of its work: its remaining budget could not cover the
   * server's queue (twice) plus its route's typical time (admission). Message: {@link AdmissionRefusedMessage}.
   */
  AdmissionRefused: 'deadline:admission:refused',
  /**
   * A call or message arrived at a server of core's `IncomingCall` (gRPC, Connect, NestJS microservices, AMQP, NATS)
   * and its budget was decided, before its handler runs (HTTP servers put theirs on `deadline:server:request`).
   * Message: {@link IncomingStartMessage}.
   */
  IncomingStart: 'deadline:incoming:start',
  /**
   * An outgoing call was cut off and its stop sent (`requested`), or the server confirmed that its work stopped
   * (`confirmed`): the moments of the call span's `deadline.cancel_requested` and `deadline.cancel_confirmed`.
   * Message: {@link CallCancelMessage}.
   */
  CallCancel: 'deadline:call:cancel',
} as const;

/**
 * Message of {@link DiagnosticsChannel.ContextStart}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.ContextStart, (message) => record(message as ContextStartMessage));
 * ```
 */
export interface ContextStartMessage {
  context: DeadlineContext;
}
/**
 * Message of {@link DiagnosticsChannel.ContextEnd}; `reason` is set when the context had stopped first.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.ContextEnd, (message) => record(message as ContextEndMessage));
 * ```
 */
export interface ContextEndMessage {
  context: DeadlineContext;
  reason: StopReason | undefined;
}
/**
 * Message of {@link DiagnosticsChannel.Exceeded}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.Exceeded, (message) => record(message as ExceededMessage));
 * ```
 */
export interface ExceededMessage {
  context: DeadlineContext | undefined;
  error: DeadlineExceededError;
}
/**
 * Message of {@link DiagnosticsChannel.Cancelled}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.Cancelled, (message) => record(message as CancelledMessage));
 * ```
 */
export interface CancelledMessage {
  context: DeadlineContext;
  error: CancelledError;
}
/**
 * Message of {@link DiagnosticsChannel.Propagate}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.Propagate, (message) => record(message as PropagateMessage));
 * ```
 */
export interface PropagateMessage {
  context: DeadlineContext | undefined;
  target: string;
  /** The budget written on the wire, in whole ms: the call's timeout (remaining − margin). */
  timeoutMs: number;
  headers: Readonly<Record<string, string>>;
}
/**
 * Message of {@link DiagnosticsChannel.CallStart}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.CallStart, (message) => record(message as CallStartMessage));
 * ```
 */
export interface CallStartMessage {
  context: DeadlineContext | undefined;
  target: string;
  /** Time left on the request before the call, in ms (`Infinity` without a deadline). */
  remainingMs: number;
  /** Timeout given to the call, in ms (`undefined` if unbounded). */
  timeoutMs: number | undefined;
}
/**
 * Message of {@link DiagnosticsChannel.CallEnd}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.CallEnd, (message) => record(message as CallEndMessage));
 * ```
 */
export interface CallEndMessage extends CallStartMessage {
  elapsedMs: number;
  outcome: 'ok' | 'deadline_exceeded' | 'cancelled' | 'error';
  /** The response's status, for transports that have one (HTTP). */
  statusCode?: number | undefined;
  error?: unknown;
}

/**
 * Message of {@link DiagnosticsChannel.CallOutlived}: the call, and how long it outlived its context's owner.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.CallOutlived, (message) => {
 *   const { target, outlivedMs } = message as CallOutlivedMessage;
 *   log.warn({ target, outlivedMs }, 'a call outlived its request: run it with runInBackground()');
 * });
 * ```
 */
export interface CallOutlivedMessage extends CallEndMessage {
  /** The call's context. */
  context: DeadlineContext;
  /** Time from the owner's end (the response) to the call's end, in ms. */
  outlivedMs: number;
}
/**
 * Message of {@link DiagnosticsChannel.MessageDropped}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.MessageDropped, (message) => {
 *   const { protocol, reason } = message as MessageDroppedMessage;
 *   droppedCounter.add(1, { protocol, reason });
 * });
 * ```
 */
export interface MessageDroppedMessage {
  /** The broker's protocol: `amqp`, `nats`. */
  protocol: string;
  /** The queue, subject or routing key the message was for. */
  target: string;
  reason: 'expired' | 'late-reply' | 'late-answer';
  /** The hop that dropped it (its `serviceName`), where it has one. */
  hop: string | undefined;
  /** For `expired`: the budget it arrived with, after the time it surely waited in the broker (ms, ≤ 0 or below minMs). */
  budgetMs?: number | undefined;
  /** For `expired`: how long it surely waited in the broker, in ms. */
  waitedMs?: number | undefined;
}

/**
 * Message of {@link DiagnosticsChannel.AdmissionRefused}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.AdmissionRefused, (message) => {
 *   const { hop, route, reason } = message as AdmissionRefusedMessage;
 *   refusedCounter.add(1, { hop, route, reason });
 * });
 * ```
 */
export interface AdmissionRefusedMessage {
  /** How the request came: `http`, `grpc`, `connect`. */
  protocol: string;
  /** The refusing hop (its `serviceName`). */
  hop: string;
  /** The route (HTTP: method and route pattern, as the adapter knows it) or RPC method refused. */
  route: string;
  /**
   * Why: `overloaded` — the server's queue (twice) plus the route's typical time is more than the request has left
   * (answered 503 with `Retry-After`, gRPC `UNAVAILABLE`); `too-little-time` — less is left than the route's fastest typical
   * time, so it could not finish even on an idle server (504, `DEADLINE_EXCEEDED`); `low-priority` — the server is
   * shedding and the caller marked the request as one to shed first (503).
   */
  reason: 'overloaded' | 'too-little-time' | 'low-priority';
  /** The request's remaining budget at arrival, in ms. */
  remainingMs: number;
  /** What it would have needed, in ms: the queue twice plus the route's expected time. */
  neededMs: number;
  /** The server's queueing delay at arrival (event-loop delay), in ms. */
  queueMs: number;
}

/**
 * Message of {@link DiagnosticsChannel.IncomingStart}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.IncomingStart, (message) => {
 *   const { hop, budgetMs, source } = message as IncomingStartMessage;
 *   if (Number.isFinite(budgetMs)) budgetHistogram.record(budgetMs, { hop, source });
 * });
 * ```
 */
export interface IncomingStartMessage {
  /** The context its handler runs in. */
  context: DeadlineContext;
  /** How it came: `grpc`, `connect`, `amqp`, `nats`, … */
  protocol: string;
  /** A `call`, or a broker's `message`. */
  kind: 'call' | 'message';
  /** The serving hop (its `serviceName`). */
  hop: string;
  /** The method (`/pkg.Service/Method`), or the queue or subject. */
  method: string;
  /**
   * The budget its handler runs with, in ms: after the clamps and, for a message, the time it surely waited in the
   * broker (0 when none was left); `Infinity` for an event that came without one (`source: 'none'`).
   */
  budgetMs: number;
  /** Where it came from: the caller (`header`: the protocol's timeout or a budget header), the service's `default`, or `none`. */
  source: 'header' | 'default' | 'none';
}

/**
 * Message of {@link DiagnosticsChannel.CallCancel}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannel.CallCancel, (message) => {
 *   const { target, state, confirmedBy } = message as CallCancelMessage;
 *   log.info({ target, state, confirmedBy }, 'call cancel');
 * });
 * ```
 */
export interface CallCancelMessage {
  context: DeadlineContext | undefined;
  target: string;
  /** `requested`: the call was cut off and its stop sent; `confirmed`: the server said the work stopped (once per call). */
  state: 'requested' | 'confirmed';
  /** Why the call was cut off. */
  reason: DeadlineExceededError | CancelledError;
  /** For `confirmed`: what confirmed it (`postgres 57014`, `KILL QUERY`, `CLIENT UNBLOCK`, a server limit). */
  confirmedBy: string | undefined;
  /** Time since the call started, in ms. */
  elapsedMs: number;
}

const contextStart = diagnostics.channel(DiagnosticsChannel.ContextStart);
const contextEnd = diagnostics.channel(DiagnosticsChannel.ContextEnd);
const exceeded = diagnostics.channel(DiagnosticsChannel.Exceeded);
const cancelled = diagnostics.channel(DiagnosticsChannel.Cancelled);
const propagate = diagnostics.channel(DiagnosticsChannel.Propagate);
const callStart = diagnostics.channel(DiagnosticsChannel.CallStart);
const callEnd = diagnostics.channel(DiagnosticsChannel.CallEnd);
const callOutlived = diagnostics.channel(DiagnosticsChannel.CallOutlived);
const messageDropped = diagnostics.channel(DiagnosticsChannel.MessageDropped);
const admissionRefused = diagnostics.channel(DiagnosticsChannel.AdmissionRefused);
const incomingStart = diagnostics.channel(DiagnosticsChannel.IncomingStart);
const callCancel = diagnostics.channel(DiagnosticsChannel.CallCancel);

/** @internal */
export function publishStart(context: DeadlineContext): void {
  if (contextStart.hasSubscribers) contextStart.publish({ context } satisfies ContextStartMessage);
}
/** @internal */
export function publishEnd(context: DeadlineContext, reason: StopReason | undefined): void {
  if (contextEnd.hasSubscribers) contextEnd.publish({ context, reason } satisfies ContextEndMessage);
}
/** @internal */
export function publishExceeded(context: DeadlineContext | undefined, error: DeadlineExceededError): void {
  if (exceeded.hasSubscribers) exceeded.publish({ context, error } satisfies ExceededMessage);
}
/** @internal */
export function publishCancelled(context: DeadlineContext, error: CancelledError): void {
  if (cancelled.hasSubscribers) cancelled.publish({ context, error } satisfies CancelledMessage);
}
/** @internal Whether anyone listens for propagation: lets an adapter skip building the message. */
export function hasPropagateSubscribers(): boolean {
  return propagate.hasSubscribers;
}
/** @internal */
export function publishPropagate(message: PropagateMessage): void {
  if (propagate.hasSubscribers) propagate.publish(message);
}
/** @internal */
export function hasCallSubscribers(): boolean {
  return callStart.hasSubscribers || callEnd.hasSubscribers;
}
/** @internal */
export function publishCallStart(message: CallStartMessage): void {
  if (callStart.hasSubscribers) callStart.publish(message);
}
/** @internal */
export function publishCallEnd(message: CallEndMessage): void {
  if (callEnd.hasSubscribers) callEnd.publish(message);
}
/** @internal */
export function hasCallOutlivedSubscribers(): boolean {
  return callOutlived.hasSubscribers;
}
/** @internal */
export function publishCallOutlived(message: CallOutlivedMessage): void {
  if (callOutlived.hasSubscribers) callOutlived.publish(message);
}
/** @internal */
export function publishMessageDropped(message: MessageDroppedMessage): void {
  if (messageDropped.hasSubscribers) messageDropped.publish(message);
}
/** @internal */
export function publishAdmissionRefused(message: AdmissionRefusedMessage): void {
  if (admissionRefused.hasSubscribers) admissionRefused.publish(message);
}
/** @internal Whether anyone listens for arrivals: lets `IncomingCall` skip building the message. */
export function hasIncomingStartSubscribers(): boolean {
  return incomingStart.hasSubscribers;
}
/** @internal */
export function publishIncomingStart(message: IncomingStartMessage): void {
  if (incomingStart.hasSubscribers) incomingStart.publish(message);
}
/** @internal Whether anyone listens for cancels: lets a call skip building the message. */
export function hasCallCancelSubscribers(): boolean {
  return callCancel.hasSubscribers;
}
/** @internal */
export function publishCallCancel(message: CallCancelMessage): void {
  if (callCancel.hasSubscribers) callCancel.publish(message);
}
