/**
 * OpenTelemetry metrics from the diagnostics channels the packages already publish on: nothing here is on a request's
 * path until `recordDeadlineMetrics()` subscribes, and nothing after its stop function unsubscribes (a channel without
 * subscribers builds no message).
 */
import diagnostics from 'node:diagnostics_channel';
import { createRequire } from 'node:module';
import {
  type AdmissionRefusedMessage,
  type CallCancelMessage,
  type CallStartMessage,
  CancelledError,
  type DeadlineContext,
  DiagnosticsChannel,
  type ExceededMessage,
  type IncomingStartMessage,
  InvalidArgumentError,
} from '@deadline/core';
import { checkFunction, checkObject, releasedScope, type Scope } from '@deadline/core/internal';
import { type Attributes, type MeterProvider, metrics } from '@opentelemetry/api';
import { Attr, createInstruments } from './instruments.js';

/**
 * Options of {@link recordDeadlineMetrics}.
 *
 * @example
 * ```ts
 * // Keep HTTP paths, with their ids as one template: `GET http://inventory:8080/stock/:id`.
 * const options: DeadlineMetricsOptions = { meterProvider, target: (target) => target.replace(/\/\d+\b/g, '/:id') };
 * ```
 */
export interface DeadlineMetricsOptions {
  /** Where the instruments are made. Default: the global one (`metrics.getMeterProvider()` of `@opentelemetry/api`). */
  meterProvider?: MeterProvider | undefined;
  /**
   * The `deadline.target` attribute of a call, from its target name (`GET http://inventory:8080/stock/42`,
   * `postgres:orders`, `redis GET`, `/pkg.Service/Method`). Default: an HTTP target without its path, which carries
   * ids (`GET http://inventory:8080`); any other as it is. Return few distinct values: each is a time series.
   */
  target?: ((target: string) => string) | undefined;
}

/** The server's end-of-request line (`RequestLine` of `@deadline/server`): the fields read here. */
interface ServerRequestLine {
  hop: string;
  budgetMs: number;
  /** A header's name, `default` or `none`. */
  budgetSource: string;
}

/** `deadline:server:request`, published by `@deadline/server` (`REQUEST_END_CHANNEL`), not a dependency of this one. */
const SERVER_REQUEST_CHANNEL = 'deadline:server:request';

/** `GET http://inventory:8080/stock/42`: the method and origin, up to the path. */
const HTTP_TARGET = /^(\S+ [a-z][a-z0-9+.-]*:\/\/[^/?#\s]+)[/?#]/i;

/** The default `deadline.target` of a call (see {@link DeadlineMetricsOptions.target}). */
function boundedTarget(target: string): string {
  return HTTP_TARGET.exec(target)?.[1] ?? target;
}

let version: string | undefined;
/** This package's version, for the meter: read once, from its own package.json. */
function packageVersion(): string {
  version ??= (createRequire(import.meta.url)('../package.json') as { version: string }).version;
  return version;
}

/** Attributes with the hop of `context`, when it names one. */
function withHop(context: DeadlineContext | undefined, attributes: Attributes): Attributes {
  if (context?.hop !== undefined) attributes[Attr.Hop] = context.hop;
  return attributes;
}

/**
 * Records the library's metrics through OpenTelemetry: the budget each request arrives with, what is left at each
 * outgoing call, the deadlines exceeded and whose they were, the cancels of calls requested and confirmed, and the
 * requests refused at admission — from the `node:diagnostics_channel` events the packages publish, on a meter named
 * `@deadline/opentelemetry`. Call it once, at startup, after the meter provider is set up; it returns the function
 * that stops recording. Every instrument: docs/reference/metrics.md.
 *
 * @example
 * ```ts
 * import { recordDeadlineMetrics } from '@deadline/opentelemetry';
 * import { MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
 * import { OTLPMetricExporter } from '@opentelemetry/exporter-metrics-otlp-http';
 *
 * const meterProvider = new MeterProvider({
 *   readers: [new PeriodicExportingMetricReader({ exporter: new OTLPMetricExporter() })],
 * });
 * const stop = recordDeadlineMetrics({ meterProvider });
 * // at shutdown:
 * stop();
 * await meterProvider.shutdown();
 * ```
 */
export function recordDeadlineMetrics(options?: DeadlineMetricsOptions): () => void {
  checkObject('options', options);
  const provider = options?.meterProvider;
  if (provider !== undefined && typeof (provider as Partial<MeterProvider> | null)?.getMeter !== 'function') {
    throw new InvalidArgumentError('meterProvider', 'a MeterProvider (an object with getMeter())', provider);
  }
  const mapTarget = checkFunction<(target: string) => string>('target', options?.target) ?? boundedTarget;
  const meter = (provider ?? metrics.getMeterProvider()).getMeter('@deadline/opentelemetry', packageVersion());
  const instruments = createInstruments(meter);

  const subscriptions: [string, (message: unknown) => void][] = [
    [
      SERVER_REQUEST_CHANNEL,
      (message) => {
        const { hop, budgetMs, budgetSource } = message as ServerRequestLine;
        if (!Number.isFinite(budgetMs)) return; // none: a long-lived request without a caller's budget
        const source = budgetSource === 'default' || budgetSource === 'none' ? budgetSource : 'header';
        instruments.requestBudget.record(budgetMs, { [Attr.Hop]: hop, [Attr.Source]: source });
      },
    ],
    [
      DiagnosticsChannel.IncomingStart,
      (message) => {
        const { hop, budgetMs, source } = message as IncomingStartMessage;
        if (!Number.isFinite(budgetMs)) return; // none: an event that came without a budget
        instruments.requestBudget.record(budgetMs, { [Attr.Hop]: hop, [Attr.Source]: source });
      },
    ],
    [
      DiagnosticsChannel.CallStart,
      (message) => {
        const { context, target, remainingMs } = message as CallStartMessage;
        if (!Number.isFinite(remainingMs)) return; // no deadline
        instruments.callBudget.record(remainingMs, withHop(context, { [Attr.Target]: mapTarget(target) }));
      },
    ],
    [
      DiagnosticsChannel.Exceeded,
      (message) => {
        const { context, error } = message as ExceededMessage;
        // A context its owner let go of (a request answered, its signal still held) runs out later: not a request
        // out of time. What it cuts then is: a call, `during-call`.
        if (error.phase === 'in-handler' && context !== undefined && releasedScope(context as Scope) !== undefined) {
          return;
        }
        const attributes = withHop(context, { [Attr.Phase]: error.phase });
        if (error.hop !== undefined) attributes[Attr.ExceededBy] = error.hop;
        instruments.expirations.add(1, attributes);
      },
    ],
    [
      DiagnosticsChannel.CallCancel,
      (message) => {
        const { context, target, state, reason, confirmedBy } = message as CallCancelMessage;
        const attributes = withHop(context, { [Attr.Target]: mapTarget(target) });
        if (state === 'requested') {
          attributes[Attr.Outcome] = reason instanceof CancelledError ? 'cancelled' : 'deadline_exceeded';
          instruments.cancelRequests.add(1, attributes);
        } else {
          if (confirmedBy !== undefined) attributes[Attr.ConfirmedBy] = confirmedBy;
          instruments.cancelConfirmations.add(1, attributes);
        }
      },
    ],
    [
      DiagnosticsChannel.AdmissionRefused,
      (message) => {
        const { hop, route, reason } = message as AdmissionRefusedMessage;
        instruments.refusals.add(1, { [Attr.Hop]: hop, [Attr.Route]: route, [Attr.RefusalReason]: reason });
      },
    ],
  ];
  const guarded = subscriptions.map(([channel, record]): [string, (message: unknown) => void] => [
    channel,
    guard(record),
  ]);
  for (const [channel, record] of guarded) diagnostics.subscribe(channel, record);
  let stopped = false;
  return function stopDeadlineMetrics(): void {
    if (stopped) return;
    stopped = true;
    for (const [channel, record] of guarded) diagnostics.unsubscribe(channel, record);
  };
}

/**
 * A subscriber runs inside the code that publishes (a request's end, a call's stop): one that threw would end the
 * process on the next tick. A throwing `target` option, or a meter that throws, is reported once, as a warning.
 */
function guard(record: (message: unknown) => void): (message: unknown) => void {
  let warned = false;
  return function recordDeadlineMetric(message: unknown): void {
    try {
      record(message);
    } catch (error) {
      if (warned) return;
      warned = true;
      process.emitWarning(
        `a deadline metric was not recorded: ${error instanceof Error ? error.message : String(error)}`,
        { type: 'DeadlineWarning', code: 'DEADLINE_METRICS_THREW' },
      );
    }
  };
}
