/**
 * BullMQ: the queue carries the trace across processes, not the deadline. `enqueue()` stores the request's trace
 * (and an optional budget for the job) in the job; `withJobContext()` rebuilds a context around the processor in
 * the worker: same trace id, a fresh budget per attempt, cancelled by BullMQ's own signal (`worker.cancelJob`).
 * BullMQ is a peer: the types here are structural, nothing of it is imported.
 */
import {
  InvalidArgumentError,
  isCancelledError,
  isDeadlineExceededError,
  runWithContext,
  traceFrom,
} from '@deadline/core';
import {
  checkFunction,
  checkHop,
  checkNumber,
  checkObject,
  DeadlineAttributes,
  monotonicNow,
  nextReady,
  type OtelAttributes,
  OutgoingCall,
  storage,
  untilStopped,
} from '@deadline/core/internal';
import { IDEMPOTENCY_KEYS } from '@deadline/idempotency/keys';
import { type CarriedContext, carrierFromContext, hopOrUndefined, JOB_CONTEXT_KEY, readCarrier } from './carrier.js';
import { endWorkSpan, markStop, runInSpan, SpanKind, startWorkSpan, type WorkSpan } from './work-span.js';

/**
 * The part of a BullMQ `Queue` used by {@link enqueue}.
 *
 * @example
 * ```ts
 * import { Queue } from 'bullmq';
 * const queue: QueueLike = new Queue('mail', { connection });
 * ```
 */
export interface QueueLike<O extends object = object, J = unknown> {
  readonly name: string;
  add(name: never, data: never, opts?: O): Promise<J>;
}

/**
 * The part of a BullMQ `Job` a wrapped processor reads.
 *
 * @example
 * ```ts
 * const processor = withJobContext(async (job: Job) => job.data);
 * ```
 */
export interface JobLike {
  readonly id?: string | undefined;
  readonly name: string;
  readonly queueName: string;
  readonly attemptsMade: number;
  data: unknown;
}

/**
 * Options of {@link enqueue}: BullMQ's job options, plus the job's own budget.
 *
 * @example
 * ```ts
 * const options: EnqueueOptions = { budgetMs: 30_000, attempts: 3, backoff: { type: 'exponential', delay: 1_000 } };
 * ```
 */
export type EnqueueOptions<O = Record<string, unknown>> = O & {
  /** Each attempt of the job runs under this budget (ms), counted from when the worker starts it. */
  budgetMs?: number | undefined;
};

/**
 * Adds a job to a BullMQ queue with the current request's trace (and an optional budget for the job), not its
 * deadline. The `add` itself is an outgoing call of the request: not sent without time left, not handed to a
 * connection that is reconnecting (it waits for Redis within the budget, and adds nothing once that has run
 * out), and the request stops waiting for it at its deadline (the job may then have been added or not: Redis
 * cannot say).
 * `data` must be a plain object: the trace travels in it under {@link JOB_CONTEXT_KEY}.
 * Inside an idempotent request (`@deadline/idempotency`), a job without a `jobId` gets the request's next
 * derived `Idempotency-Key` as its id, so a retry of the request that takes it over does not add it again
 * (while BullMQ keeps the job: see `removeOnComplete` in docs/guides/idempotency.md).
 *
 * @example
 * ```ts
 * import { enqueue } from '@deadline/jobs';
 * import { Queue } from 'bullmq';
 *
 * const mail = new Queue('mail', { connection: { host: '127.0.0.1', port: 6379 } });
 * app.post('/signup', async (request) => {
 *   const user = await users.create(request.body);
 *   await enqueue(mail, 'welcome', { userId: user.id }, { budgetMs: 30_000, attempts: 3 });
 *   return user;
 * });
 * ```
 */
export async function enqueue<O extends object, J>(
  queue: QueueLike<O, J>,
  name: string,
  data: Record<string, unknown>,
  options?: EnqueueOptions<O>,
): Promise<J> {
  if (typeof queue?.add !== 'function') throw new InvalidArgumentError('queue', 'a BullMQ Queue', queue);
  if (!isPlainObject(data) || Object.hasOwn(data, JOB_CONTEXT_KEY)) {
    throw new InvalidArgumentError(
      'data',
      `a plain object without a "${JOB_CONTEXT_KEY}" key (the trace travels in it)`,
      data,
    );
  }
  const { budgetMs, ...opts } = (checkObject('options', options) ?? {}) as EnqueueOptions;
  checkNumber('options.budgetMs', budgetMs, { min: 1, max: 2 ** 31 - 1 });
  const payload = { ...data, [JOB_CONTEXT_KEY]: carrierFromContext(budgetMs) };
  // Inside an idempotent request, a job without its own id gets the request's next derived key: an attempt that
  // takes the request over adds the same job id, which BullMQ does not add twice.
  const jobId = (opts as { jobId?: unknown }).jobId ?? IDEMPOTENCY_KEYS.get()?.next();
  const jobOpts = jobId === undefined ? opts : { ...opts, jobId };
  const add = () => queue.add(name as never, payload as never, jobOpts as O);
  // Outside any context: BullMQ as it is (no call events, as the other adapters).
  if (storage.getStore() === undefined) return add();
  // Throws (before anything is sent) when the request has no time left; without a deadline, race() just waits.
  const call = OutgoingCall.start(`${queue.name} enqueue`, { propagates: false });
  try {
    const job = await call.race(async () => {
      // While Redis is away, the add would wait in ioredis's offline queue and be run whenever the server is
      // back, long after the request gave up: a job added for nobody. Under a deadline it waits for the server
      // here instead, and is never handed to BullMQ once the request has stopped.
      if (call.timeoutMs !== undefined) await untilReady(queue);
      if (call.stopReason !== undefined) throw call.stopReason;
      return add();
    });
    call.end();
    return job;
  } catch (error) {
    call.end(error);
    throw error;
  }
}

/** The part of an ioredis client {@link untilReady} reads. */
interface ClientLike {
  readonly status: string;
  once(event: string, listener: () => void): unknown;
  off(event: string, listener: () => void): unknown;
}

/** ioredis statuses in which a command goes out, or fails at once, rather than into the offline queue. */
const SENDS_NOW = new Set(['ready', 'wait', 'end', 'close']);

/**
 * Resolves when the queue's ioredis client can take a command now: at once when it is ready (or cannot be seen:
 * BullMQ 6 shows it as `getBackend().client`, 5 as `client`, each a promise), else at its next `ready` or `end`.
 * The caller races it against the call's stop.
 */
async function untilReady(queue: object): Promise<void> {
  const backend = (queue as { getBackend?: () => { client?: unknown } }).getBackend?.();
  const pending = backend?.client ?? (queue as { client?: unknown }).client;
  const client = (await Promise.resolve(pending).catch(() => undefined)) as ClientLike | undefined;
  if (typeof client?.status !== 'string' || typeof client.once !== 'function' || SENDS_NOW.has(client.status)) return;
  await nextReady(client);
}

/** A JSON-like object (a Map or a class instance would lose its contents when spread and stored). */
function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/**
 * Options of {@link withJobContext}.
 *
 * @example
 * ```ts
 * const options: JobContextOptions = { hop: 'mail-worker', budgetMs: 60_000 };
 * ```
 */
export interface JobContextOptions {
  /** This worker's hop name, for logs and errors. Default: the queue's name. */
  hop?: string | undefined;
  /** The budget (ms) of a job enqueued without one. Default: none (the job's calls are unbounded). */
  budgetMs?: number | undefined;
}

/**
 * Wraps a BullMQ processor: each attempt runs in a context rebuilt from the job — the enqueuing request's trace
 * id (a child span), its baggage, log bindings naming the job — under the job's own budget, counted from the
 * start of the attempt. The processor gets the context's signal as its third argument: it aborts at the budget,
 * or when BullMQ cancels the job (`worker.cancelJob`). When the budget runs out the attempt fails with the
 * `DeadlineExceededError` (even if the processor ignores the signal), and BullMQ's `attempts`/`backoff` apply.
 * `job.data` is given to the processor without the carrier key.
 *
 * @example
 * ```ts
 * import { withJobContext } from '@deadline/jobs';
 * import { type Job, Worker } from 'bullmq';
 *
 * new Worker(
 *   'mail',
 *   withJobContext(async (job: Job<{ userId: number }>, token, signal) => {
 *     const user = await db.query('select * from users where id = $1', [job.data.userId]); // bounded by the job's budget
 *     await mailer.send(user.rows[0], { signal });
 *   }, { hop: 'mail-worker' }),
 *   { connection },
 * );
 * ```
 */
export function withJobContext<J extends JobLike, R>(
  processor: (job: J, token?: string, signal?: AbortSignal) => Promise<R>,
  options: JobContextOptions = {},
): (job: J, token?: string, signal?: AbortSignal) => Promise<R> {
  checkFunction('processor', processor, false);
  checkObject('options', options);
  const hop = checkHop(options.hop, 'options.hop');
  const defaultBudgetMs = checkNumber('options.budgetMs', options.budgetMs, { min: 1, max: 2 ** 31 - 1 });
  return (job, token, signal) => {
    let carried = readCarrier(undefined);
    const data = job.data;
    if (typeof data === 'object' && data !== null && JOB_CONTEXT_KEY in data) {
      const { [JOB_CONTEXT_KEY]: carrier, ...rest } = data as Record<string, unknown>;
      carried = readCarrier(carrier);
      job.data = rest;
    }
    const bindings = {
      queue: job.queueName,
      job: job.name,
      jobId: job.id,
      attempt: job.attemptsMade + 1,
      ...(carried.hop === undefined ? {} : { enqueuedBy: carried.hop }),
    };
    const budgetMs = carried.budgetMs ?? defaultBudgetMs;
    const work = jobSpan(job, carried, budgetMs);
    const startedAt = monotonicNow();
    const attempt = runInSpan(work, () =>
      runWithContext(
        {
          root: true,
          deadline: budgetMs,
          // A job enqueued outside any request (or by hand) starts a trace of its own, as a request would.
          trace: work?.trace ?? carried.trace ?? traceFrom(),
          // A queue name that is not a valid hop name is not used as one.
          hop: hop ?? hopOrUndefined(job.queueName),
          baggage: carried.baggage,
          bindings,
          signal,
        },
        // The attempt ends at its budget (or cancel) even if the processor does not listen: BullMQ then records
        // the failure and retries per the job's options.
        (ctx) =>
          untilStopped(
            ctx,
            () => processor(job, token, ctx.signal),
            (reason) => {
              if (work !== undefined) markStop(work, reason, monotonicNow() - startedAt);
            },
          ),
      ),
    );
    if (work === undefined) return attempt;
    return attempt.then(
      (value) => {
        endWorkSpan(work, 'ok', undefined);
        return value;
      },
      (error: unknown) => {
        const outcome = isDeadlineExceededError(error)
          ? 'deadline_exceeded'
          : isCancelledError(error)
            ? 'cancelled'
            : 'error';
        endWorkSpan(work, outcome, error);
        throw error;
      },
    );
  };
}

/**
 * With OpenTelemetry, each attempt is a consumer span (`process <queue>`), the child of the span that enqueued
 * the job (the carrier's traceparent), with the messaging attributes of OpenTelemetry's conventions.
 */
function jobSpan(job: JobLike, carried: CarriedContext, budgetMs: number | undefined): WorkSpan | undefined {
  const trace = carried.trace;
  const attributes: OtelAttributes = {
    'messaging.system': 'bullmq',
    'messaging.operation.type': 'process',
    'messaging.destination.name': job.queueName,
  };
  if (job.id !== undefined) attributes['messaging.message.id'] = String(job.id);
  if (budgetMs !== undefined) attributes[DeadlineAttributes.BudgetMs] = budgetMs;
  const parent =
    trace?.parentId === undefined
      ? undefined
      : {
          traceId: trace.traceId,
          spanId: trace.parentId,
          flags: trace.flags,
          tracestate: trace.tracestate,
          remote: true,
        };
  return startWorkSpan(`process ${job.queueName}`, SpanKind.Consumer, parent, attributes);
}
