/**
 * Detached work: Go's `context.WithoutCancel` as a tracked task. It keeps the request's trace, hop, baggage and
 * log bindings, drops the request's deadline (optionally running under a budget of its own), never rejects
 * (failures are logged with the trace id), and is counted so that shutdown can wait for it.
 */
import { isDeadlineExceededError, runWithContext, type TraceContext, traceFrom, withoutCancel } from '@deadline/core';
import {
  checkFunction,
  checkName,
  checkNumber,
  DeadlineAttributes,
  monotonicNow,
  storage,
  timerDelay,
} from '@deadline/core/internal';
import { formatTraceparent } from '@deadline/core/wire';
import { type LoggerLike, stderrLogger } from './logger.js';
import { endWorkSpan, markStop, runInSpan, SpanKind, startWorkSpan } from './work-span.js';

/**
 * Options of {@link Background.run} and {@link runInBackground}.
 *
 * @example
 * ```ts
 * const options: RunInBackgroundOptions = { budgetMs: 5_000 };
 * runInBackground('audit', () => audit.insert(event), options);
 * ```
 */
export interface RunInBackgroundOptions {
  /**
   * The task's own budget (ms), started when the task starts: its database, HTTP and Redis calls are bounded by
   * it. Default: none (the task's calls are not bounded by any deadline).
   */
  budgetMs?: number | undefined;
}

/**
 * How a background task ended. The task's promise always resolves with it, never rejects.
 *
 * @example
 * ```ts
 * const outcome: TaskOutcome = await runInBackground('audit', () => audit.insert(event));
 * if (outcome.outcome !== 'ok') metrics.increment('audit.failed');
 * ```
 */
export interface TaskOutcome {
  task: string;
  /** `deadline`: the task's own budget ran out. */
  outcome: 'ok' | 'error' | 'deadline';
  error?: unknown;
  elapsedMs: number;
}

/**
 * What {@link Background.drain} saw: how many tasks finished while it waited, and those still running when it
 * gave up (each also logged).
 *
 * @example
 * ```ts
 * const report: DrainReport = await drain({ timeoutMs: 10_000 });
 * if (report.pending.length > 0) process.exitCode = 1;
 * ```
 */
export interface DrainReport {
  completed: number;
  pending: { task: string; traceId: string | undefined; elapsedMs: number }[];
}

/**
 * Options of {@link Background}.
 *
 * @example
 * ```ts
 * const options: BackgroundOptions = { logger: pino() };
 * ```
 */
export interface BackgroundOptions {
  /** Where tasks report. Default: pino-shaped JSON lines on stderr. */
  logger?: LoggerLike | undefined;
}

interface Task {
  readonly name: string;
  readonly traceId: string | undefined;
  readonly startedAt: number;
  readonly done: Promise<TaskOutcome>;
}

/**
 * A set of detached tasks and the logger they report to. Most applications use the default one through
 * {@link runInBackground} and {@link drain}; a library that wants its own shutdown accounting makes its own.
 *
 * @example
 * ```ts
 * import { Background } from '@deadline/jobs';
 * const mail = new Background({ logger: app.log });
 * mail.run('welcome-mail', () => mailer.send(user), { budgetMs: 10_000 });
 * await mail.drain({ timeoutMs: 5_000 });
 * ```
 */
export class Background {
  readonly #tasks = new Set<Task>();
  #logger: LoggerLike | undefined;
  #finished = 0;

  constructor(options: BackgroundOptions = {}) {
    this.#logger = options.logger;
  }

  /** Tasks finished since this `Background` was made. */
  get completed(): number {
    return this.#finished;
  }

  /** Tasks running now. */
  get size(): number {
    return this.#tasks.size;
  }

  /** Where tasks report; settable once the app's logger exists (the Fastify plugin sets it if unset). */
  get logger(): LoggerLike {
    return this.#logger ?? stderrLogger;
  }
  set logger(logger: LoggerLike | undefined) {
    this.#logger = logger;
  }

  /** Whether a logger was given (rather than the stderr default). */
  get hasLogger(): boolean {
    return this.#logger !== undefined;
  }

  /**
   * Starts `fn` after the current tick, detached from the current request: same trace id (a child span of the
   * request's), baggage and log bindings (plus `task` and `detachedFrom`), no request deadline, optionally its
   * own `budgetMs`. Resolves with its outcome; never rejects.
   */
  run(name: string, fn: () => unknown, options: RunInBackgroundOptions = {}): Promise<TaskOutcome> {
    checkName('name', name, false);
    checkFunction('fn', fn, false);
    const budgetMs = checkNumber('budgetMs', options?.budgetMs, { min: 1, max: MAX_BUDGET_MS });
    const parent = storage.getStore()?.trace;
    // With OpenTelemetry, a span of its own under the request's (see work-span.ts).
    const work = startWorkSpan(
      `background ${name}`,
      SpanKind.Internal,
      parent === undefined
        ? undefined
        : {
            traceId: parent.traceId,
            spanId: parent.spanId,
            flags: parent.flags,
            tracestate: parent.tracestate,
            remote: false,
          },
      budgetMs === undefined
        ? { [DeadlineAttributes.Task]: name }
        : { [DeadlineAttributes.Task]: name, [DeadlineAttributes.BudgetMs]: budgetMs },
    );
    // A child span of the request's: what the task calls downstream is its own span in the same trace.
    // Started outside any request: a trace of its own, so its lines can still be joined.
    const trace: TraceContext =
      work?.trace ?? (parent === undefined ? traceFrom() : traceFrom(formatTraceparent(parent), parent.tracestate));
    const bindings = { task: name, ...(parent === undefined ? {} : { detachedFrom: parent.spanId }) };
    const startedAt = monotonicNow();
    const logger = () => this.logger;
    const done = new Promise<TaskOutcome>((resolve) => {
      // After the current tick: the request finishes what it was doing (and answers) first.
      setImmediate(() => {
        withoutCancel(() =>
          runInSpan(work, () =>
            runWithContext({ deadline: budgetMs, trace, bindings }, async (ctx) => {
              const offStop =
                work === undefined
                  ? undefined
                  : ctx.onStop((reason) => markStop(work, reason, monotonicNow() - startedAt));
              let outcome: TaskOutcome;
              try {
                await fn();
                outcome = { task: name, outcome: 'ok', elapsedMs: monotonicNow() - startedAt };
              } catch (error) {
                outcome = {
                  task: name,
                  outcome: isDeadlineExceededError(error) ? 'deadline' : 'error',
                  error,
                  elapsedMs: monotonicNow() - startedAt,
                };
              }
              if (work !== undefined) {
                offStop?.();
                endWorkSpan(
                  work,
                  outcome.outcome === 'deadline' ? 'deadline_exceeded' : outcome.outcome,
                  outcome.error,
                );
              }
              // Outside the try: a logger that throws must not turn a task that succeeded into a failed one.
              const line = { ...bindings, ...fields(trace, budgetMs, outcome) };
              if (outcome.outcome === 'ok') log(logger(), 'info', line, 'background task done');
              else log(logger(), 'error', { ...line, err: outcome.error }, 'background task failed');
              return outcome;
            }),
          ),
        ).then(resolve);
      });
    });
    const task: Task = { name, traceId: trace.traceId, startedAt, done };
    this.#tasks.add(task);
    void done.then(() => {
      this.#tasks.delete(task);
      this.#finished++;
    });
    return done;
  }

  /**
   * Waits for the running tasks (and any they start meanwhile) for at most `timeoutMs`. Tasks still running then
   * are logged, one line each, and reported; they are not stopped.
   */
  async drain(options: { timeoutMs?: number | undefined } = {}): Promise<DrainReport> {
    const timeoutMs = checkNumber('timeoutMs', options?.timeoutMs) ?? 10_000;
    const finishedBefore = this.#finished;
    const end = monotonicNow() + timeoutMs;
    while (this.#tasks.size > 0) {
      const left = end - monotonicNow();
      if (left <= 0) break;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all([...this.#tasks].map((task) => task.done)),
        new Promise((resolve) => {
          timer = setTimeout(resolve, timerDelay(left));
        }),
      ]);
      clearTimeout(timer);
      // Let the bookkeeping of tasks that just finished run before counting again.
      await new Promise((resolve) => setImmediate(resolve));
    }
    const now = monotonicNow();
    const pending = [...this.#tasks].map((task) => ({
      task: task.name,
      traceId: task.traceId,
      elapsedMs: now - task.startedAt,
    }));
    for (const task of pending) {
      log(
        this.logger,
        'warn',
        { ...task, detached: true, drainTimeoutMs: timeoutMs },
        'background task still running at drain timeout',
      );
    }
    return { completed: this.#finished - finishedBefore, pending };
  }
}

/** The largest budget a timer can hold (setTimeout fires at once above it). */
const MAX_BUDGET_MS = 2 ** 31 - 1;

/** Logs without ever throwing: a broken logger must not break the task accounting or the drain. */
function log(logger: LoggerLike, level: 'info' | 'warn' | 'error', fields: Record<string, unknown>, message: string) {
  try {
    logger[level](fields, message);
  } catch {
    // The line goes to stderr instead: a failure in detached work is never silent.
    if (logger !== stderrLogger) stderrLogger[level](fields, message);
  }
}

function fields(trace: TraceContext, budgetMs: number | undefined, outcome: TaskOutcome) {
  return {
    detached: true,
    traceId: trace.traceId,
    spanId: trace.spanId,
    ...(budgetMs === undefined ? {} : { budgetMs }),
    elapsedMs: Math.round(outcome.elapsedMs * 10) / 10,
    outcome: outcome.outcome,
  };
}

/**
 * The process's default {@link Background}: what {@link runInBackground} and {@link drain} use.
 *
 * @example
 * ```ts
 * import { background } from '@deadline/jobs';
 * background.logger = app.log;
 * ```
 */
export const background = new Background();

/**
 * Runs `fn` after the current tick, detached from the current request (its trace kept, its deadline dropped),
 * optionally under its own budget; tracked by the default {@link Background} so shutdown can {@link drain} it.
 * Never rejects: a failure is logged with the trace id and reported in the outcome.
 *
 * @example
 * ```ts
 * import { runInBackground } from '@deadline/jobs';
 * app.post('/orders', async (request) => {
 *   const order = await orders.create(request.body); // bounded by the request's deadline
 *   runInBackground('audit', () => audit.insert(order), { budgetMs: 5_000 }); // outlives the request
 *   return order;
 * });
 * ```
 */
export function runInBackground(
  name: string,
  fn: () => unknown,
  options?: RunInBackgroundOptions,
): Promise<TaskOutcome> {
  return background.run(name, fn, options);
}

/**
 * Waits (at most `timeoutMs`, default 10 s) for the default {@link Background}'s tasks; what still runs then is
 * logged and reported. Call it on shutdown, after the server stopped taking requests.
 *
 * @example
 * ```ts
 * import { drain } from '@deadline/jobs';
 * process.once('SIGTERM', async () => {
 *   await new Promise((resolve) => server.close(resolve));
 *   await drain({ timeoutMs: 10_000 });
 *   process.exit(0);
 * });
 * ```
 */
export function drain(options?: { timeoutMs?: number | undefined }): Promise<DrainReport> {
  return background.drain(options);
}
