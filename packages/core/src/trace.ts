/**
 * W3C Trace Context (`traceparent`, `tracestate`): enough to keep one trace id across hops so that every hop's
 * log lines join up. This is not a tracer; with OpenTelemetry installed, its propagator stays in charge.
 */
import { randomFillSync } from 'node:crypto';

/**
 * The trace a context belongs to.
 *
 * @example
 * ```ts
 * import { currentContext } from '@deadline/core';
 * const traceId = currentContext()?.trace?.traceId; // 32 lowercase hex digits
 * ```
 */
export interface TraceContext {
  /** 32 lowercase hex digits, never all zero. */
  readonly traceId: string;
  /** This hop's span id (16 hex digits): what the next hop receives as its parent. */
  readonly spanId: string;
  /** The caller's span id from the incoming `traceparent`, if there was one. */
  readonly parentId: string | undefined;
  /** W3C trace-flags; bit 0 is "sampled". */
  readonly flags: number;
  /** The incoming `tracestate`, passed on unchanged (undefined if absent or malformed). */
  readonly tracestate: string | undefined;
}

/**
 * The parts of a `traceparent` header.
 *
 * @example
 * ```ts
 * const parsed: ParsedTraceparent | undefined = parseTraceparent(req.headers.traceparent);
 * ```
 */
export interface ParsedTraceparent {
  traceId: string;
  parentId: string;
  flags: number;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\s]*)?$/;
const ALL_ZERO_TRACE = '00000000000000000000000000000000';
const ALL_ZERO_SPAN = '0000000000000000';
const MAX_TRACESTATE_LENGTH = 512;
// tracestate list members are printable ASCII; reject anything else rather than forward it.
const TRACESTATE = /^[\x20-\x7e]*$/;
/** Flags for a trace this process starts: sampled, so that parent-based samplers downstream keep their default. */
const NEW_TRACE_FLAGS = 0x01;

/**
 * Parses a W3C `traceparent` header. Returns `undefined` for anything invalid (wrong length, upper case,
 * version `ff`, an all-zero id, version 00 with extra fields).
 *
 * @example
 * ```ts
 * parseTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
 * // → { traceId: '4bf9…4736', parentId: '00f0…02b7', flags: 1 }
 * ```
 */
export function parseTraceparent(value: unknown): ParsedTraceparent | undefined {
  if (typeof value !== 'string' || value.length > 512) return undefined;
  const match = TRACEPARENT.exec(value.trim());
  if (match === null) return undefined;
  const [, version, traceId, parentId, flags, rest] = match as unknown as [
    string,
    string,
    string,
    string,
    string,
    string?,
  ];
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (traceId === ALL_ZERO_TRACE || parentId === ALL_ZERO_SPAN) return undefined;
  return { traceId, parentId, flags: Number.parseInt(flags, 16) };
}

/**
 * The `traceparent` to send downstream: this hop's span as the parent.
 *
 * @example
 * ```ts
 * headers.traceparent = formatTraceparent(ctx.trace);
 * ```
 */
export function formatTraceparent(trace: TraceContext): string {
  return `00-${trace.traceId}-${trace.spanId}-${(trace.flags & 0xff).toString(16).padStart(2, '0')}`;
}

/**
 * The trace for a request: continues the incoming one when `traceparent` is valid, starts a new one otherwise.
 * This hop always gets a fresh span id.
 *
 * @example
 * ```ts
 * const trace = traceFrom(req.headers.traceparent, req.headers.tracestate);
 * ```
 */
export function traceFrom(traceparent?: unknown, tracestate?: unknown): TraceContext {
  const parsed = parseTraceparent(traceparent);
  if (parsed === undefined) return new Trace(undefined, undefined, NEW_TRACE_FLAGS, undefined);
  return new Trace(parsed.traceId, parsed.parentId, parsed.flags, cleanTracestate(tracestate));
}

/**
 * A root context's trace before anyone read it (`Scope.root`): the request brought none, so a new one is started,
 * but not even its object is made until something asks — for a server answering in time with logging off, the
 * two were most of what the trace cost per request (0.7k instructions on Node 20). @internal
 */
export const NEW_TRACE: unique symbol = Symbol('a new trace, made when first read');

/**
 * Ids are drawn when first read, not when the request arrives: most requests that log nothing and call
 * nobody never need them, and drawing them is the largest cost of starting a context.
 */
class Trace implements TraceContext {
  #traceId: string | undefined;
  #spanId: string | undefined;
  readonly parentId: string | undefined;
  readonly flags: number;
  readonly tracestate: string | undefined;

  constructor(
    traceId: string | undefined,
    parentId: string | undefined,
    flags: number,
    tracestate: string | undefined,
  ) {
    this.#traceId = traceId;
    this.parentId = parentId;
    this.flags = flags;
    this.tracestate = tracestate;
  }

  get traceId(): string {
    return (this.#traceId ??= newTraceId());
  }

  get spanId(): string {
    return (this.#spanId ??= newSpanId());
  }

  toJSON(): Record<string, unknown> {
    return traceJson(this);
  }
}

/** A trace as logged and serialised: its fields, the lazily drawn ids included. @internal */
export function traceJson(trace: TraceContext): Record<string, unknown> {
  return {
    traceId: trace.traceId,
    spanId: trace.spanId,
    parentId: trace.parentId,
    flags: trace.flags,
    tracestate: trace.tracestate,
  };
}

function cleanTracestate(value: unknown): string | undefined {
  const joined = Array.isArray(value) ? value.join(',') : value;
  if (typeof joined !== 'string' || joined.length === 0 || joined.length > MAX_TRACESTATE_LENGTH) return undefined;
  return TRACESTATE.test(joined) ? joined : undefined;
}

// Ids come from a pooled buffer of random bytes: one getrandom() call serves ~170 requests.
const POOL_SIZE = 4096;
const pool = Buffer.allocUnsafe(POOL_SIZE);
let poolOffset = POOL_SIZE;

function randomHex(bytes: number): string {
  if (poolOffset + bytes > POOL_SIZE) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const hex = pool.toString('hex', poolOffset, poolOffset + bytes);
  poolOffset += bytes;
  return hex;
}

/** A new random W3C trace id (32 lowercase hex digits, never all zero). @example `const id = newTraceId();` */
export function newTraceId(): string {
  const id = randomHex(16);
  return id === ALL_ZERO_TRACE ? newTraceId() : id;
}

/** A new random span id (16 lowercase hex digits, never all zero). @example `const id = newSpanId();` */
export function newSpanId(): string {
  const id = randomHex(8);
  return id === ALL_ZERO_SPAN ? newSpanId() : id;
}
