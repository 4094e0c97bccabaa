/**
 * `@opentelemetry/api`, when the application has it: an optional peer dependency, loaded once, on first use (not
 * on import), and never required. Without it every function of this folder answers "not active" at the cost of
 * one comparison.
 *
 * Only the handful of API members this project uses are typed here, structurally, so that the published types
 * of `@deadline/core` do not depend on a package the application may not have.
 */
import { createRequire } from 'node:module';

/** The parts of an OpenTelemetry `SpanContext` read here. @internal */
export interface OtelSpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  traceState?: { serialize(): string } | undefined;
  isRemote?: boolean | undefined;
}

/** Attribute values as OpenTelemetry accepts them. @internal */
export type OtelAttributes = Record<string, string | number | boolean | undefined>;

/** The parts of an OpenTelemetry `Span` used here. @internal */
export interface OtelSpan {
  spanContext(): OtelSpanContext;
  isRecording(): boolean;
  setAttribute(key: string, value: string | number | boolean): unknown;
  setAttributes(attributes: OtelAttributes): unknown;
  addEvent(name: string, attributes?: OtelAttributes): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  recordException(exception: unknown): unknown;
  end(): void;
}

/** An OpenTelemetry `Context` (immutable). @internal */
export interface OtelContext {
  getValue(key: symbol): unknown;
  setValue(key: symbol, value: unknown): OtelContext;
}

/** The parts of an OpenTelemetry `Tracer` used here. @internal */
export interface OtelTracer {
  startSpan(name: string, options?: { kind?: number; attributes?: OtelAttributes }, context?: OtelContext): OtelSpan;
}

/** The parts of `@opentelemetry/api` used here. @internal */
export interface OtelApi {
  context: {
    active(): OtelContext;
    with<R>(context: OtelContext, fn: () => R): R;
  };
  propagation: {
    fields(): string[];
    inject(context: OtelContext, carrier: Record<string, string>): void;
    extract(context: OtelContext, carrier: Record<string, unknown>): OtelContext;
  };
  trace: {
    getSpan(context: OtelContext): OtelSpan | undefined;
    setSpan(context: OtelContext, span: OtelSpan): OtelContext;
    setSpanContext(context: OtelContext, spanContext: OtelSpanContext): OtelContext;
    getTracer(name: string, version?: string): OtelTracer;
    isSpanContextValid(spanContext: OtelSpanContext): boolean;
  };
  createTraceState?(raw: string): { serialize(): string };
  ROOT_CONTEXT: OtelContext;
}

/** `undefined`: not looked for yet; `null`: not installed (or not loadable). */
let api: OtelApi | null | undefined;

/**
 * Where API 1.x keeps what was registered (its `global-utils`: one object per major version, shared by every
 * copy of the API in the process). Nothing there, nothing registered: OpenTelemetry is not in use, and the API
 * need not even be loaded — loading it takes ~20 ms, which must not land in a request.
 */
const REGISTRY = Symbol.for('opentelemetry.js.api.1');
type Registry = { propagation?: unknown; context?: unknown; trace?: unknown } | undefined;

/** What the application registered with OpenTelemetry's API, if anything. @internal */
export function openTelemetryRegistry(): Registry {
  return (globalThis as { [REGISTRY]?: Registry })[REGISTRY];
}

/**
 * The API, when the application has registered something with it (an SDK, a propagator, a context manager):
 * by then the application has loaded it, and loading it here is a cache hit. @internal
 */
export function registeredOpenTelemetry(): OtelApi | undefined {
  return openTelemetryRegistry() === undefined ? undefined : openTelemetry();
}

/**
 * The application's `@opentelemetry/api`, or `undefined` when it has none. The API keeps its registrations
 * (tracer provider, propagator, context manager) on a process-wide global, so the copy resolved from here sees
 * those the application made with its own copy, as long as both are 1.x.
 * @internal
 */
export function openTelemetry(): OtelApi | undefined {
  if (api === undefined) api = load();
  return api ?? undefined;
}

function load(): OtelApi | null {
  try {
    const loaded = createRequire(import.meta.url)('@opentelemetry/api') as Partial<OtelApi>;
    // An unexpected shape (a stub, a far-off major version) counts as absent rather than failing later.
    const usable =
      typeof loaded.context?.active === 'function' &&
      typeof loaded.propagation?.fields === 'function' &&
      typeof loaded.trace?.getSpan === 'function';
    return usable ? (loaded as OtelApi) : null;
  } catch {
    return null;
  }
}

/**
 * Replaces the loaded API (tests: `null` stands for "not installed"); `undefined` makes the next use look again.
 * @internal
 */
export function setOpenTelemetryForTests(value: OtelApi | null | undefined): void {
  api = value;
}
