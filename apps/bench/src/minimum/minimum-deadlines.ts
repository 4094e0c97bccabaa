/**
 * The framework-free half of the complete minimum (deadline-minimum-complete.ts for fastify,
 * express-minimum-complete.ts for express): what any adapter keeping the library's promises does per request,
 * each part written as cheaply as it can be, by hand, for the instruction counts:
 * - every budget header the library understands is looked at (ours, `grpc-timeout`, `Connect-Timeout-Ms`,
 *   Envoy's; the absolute form is looked for and refused, as by default); the smallest valid one wins, clamped
 *   to the route's maximum;
 * - the caller's `traceparent` is kept (parsed only when read), and OpenTelemetry's registry is looked at;
 * - deadlines may come in any order: a binary heap, and a request that ends leaves it (the core's expiry queue
 *   written again on purpose: calling it would count the library's code, not the least one can write);
 * - one shared timer answers 504 at the deadline, inside the request's context;
 * - the response's end is heard on Node's diagnostics channel, the client's leaving through one `close` listener
 *   per socket; the end records when it ended (for calls that outlive it), its outcome, and asks the logger
 *   whether a line would be written.
 * A count of it is a floor under any adapter that keeps those promises, not a design.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { subscribe } from 'node:diagnostics_channel';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** One request's deadline; `R` is the framework's response (fastify's reply, express's res). */
export interface RequestScope<R> {
  readonly arrivedAt: number;
  readonly dueAt: number;
  readonly budgetMs: number;
  /** Which header the budget came from (its index in the headers looked at), or -1 for the default. */
  readonly source: number;
  /** The caller's `traceparent`, parsed only if something reads the trace. */
  readonly traceparent: string | undefined;
  /** Index in the heap while waiting for its deadline, -1 otherwise. */
  at: number;
  stopped: boolean;
  endedAt: number;
  outcome: 'ok' | 'error' | 'deadline_exceeded' | 'cancelled' | undefined;
  /** Dropped when the response is over: the scope may outlive it (calls left running), its request must not. */
  response: R | undefined;
}

/** What the framework-free half asks of the framework's response. */
export interface MinimumHost<R> {
  /** Node's response under the framework's. */
  raw(response: R): ServerResponse;
  /** Answers 504 unless an answer has begun; runs inside the request's context. */
  answerDeadline(response: R): void;
  /** The request's logger, if it has one. */
  logger(response: R): { info(fields: object, message: string): void } | undefined;
}

/** The starts and the context of one server's requests. */
export interface MinimumDeadlines<R> {
  readonly als: AsyncLocalStorage<RequestScope<R>>;
  /** The request's deadline, started and placed in the queue; its end is watched on `socket`. */
  start(
    headers: IncomingHttpHeaders,
    trusted: boolean,
    arrivedAt: number,
    response: R,
    socket: Socket,
  ): RequestScope<R>;
}

const DEFAULT_MS = 30_000;
const MAX_MS = 2_147_483_647;
const OTEL_REGISTRY = Symbol.for('opentelemetry.js.api.1');
/** A socket, with the open requests of each server's deadlines under a key of their own (see `minimumDeadlines`). */
type TrackedSocket = Socket & Record<symbol, RequestScope<unknown>[] | undefined>;

/**
 * `process.hrtime`, read once: `process` on the global is a getter of Node's (a global load and a call, ~0.1k
 * instructions a read on Node 22, callgrind), which a request's two clock reads need not pay.
 */
const hrtime = process.hrtime;

/** Milliseconds on the monotonic clock (process.hrtime: Node 20's cheapest read). */
export function now(): number {
  const [seconds, nanoseconds] = hrtime();
  return seconds * 1e3 + nanoseconds / 1e6;
}

/** Whole milliseconds, digits only (at most 10), as `X-Request-Deadline` and `Connect-Timeout-Ms` carry them. */
function milliseconds(value: string | string[] | undefined): number {
  if (typeof value !== 'string' || value.length === 0 || value.length > 10) return -1;
  let ms = 0;
  for (let i = 0; i < value.length; i++) {
    const digit = value.charCodeAt(i) - 48;
    if (digit < 0 || digit > 9) return -1;
    ms = ms * 10 + digit;
  }
  return ms;
}

/** `grpc-timeout`: up to 8 digits and a unit. */
function grpcTimeout(value: string | string[] | undefined): number {
  if (typeof value !== 'string' || value.length < 2 || value.length > 9) return -1;
  const amount = milliseconds(value.slice(0, -1));
  if (amount < 0) return -1;
  switch (value.charCodeAt(value.length - 1)) {
    case 72: // H
      return amount * 3_600_000;
    case 77: // M
      return amount * 60_000;
    case 83: // S
      return amount * 1_000;
    case 109: // m
      return amount;
    case 117: // u
      return amount / 1_000;
    case 110: // n
      return amount / 1_000_000;
    default:
      return -1;
  }
}

/** The smallest valid budget of the headers that are not ours, when any of them came (rare on this path). */
function otherBudgets(headers: IncomingHttpHeaders, ours: number): [number, number] {
  let best = ours;
  let source = ours >= 0 ? 0 : -1;
  const candidates = [
    grpcTimeout(headers['grpc-timeout']),
    milliseconds(headers['connect-timeout-ms']),
    milliseconds(headers['x-envoy-expected-rq-timeout-ms']),
  ];
  for (let i = 0; i < candidates.length; i++) {
    const ms = candidates[i] as number;
    if (ms >= 0 && (best < 0 || ms < best)) {
      best = ms;
      source = i + 1;
    }
  }
  // `X-Request-Deadline-At` (epoch milliseconds) is refused, as the library refuses it unless its `absolute`
  // option is set: its presence only sent the request here, where the library reports it.
  return [best, source];
}

/**
 * The minimum's deadlines for one server: its context, queue, timer and ends.
 *
 * @example
 * ```ts
 * const deadlines = minimumDeadlines<ServerResponse>({
 *   raw: (res) => res,
 *   answerDeadline: (res) => void (res.headersSent || res.writeHead(504).end()),
 *   logger: () => undefined,
 * });
 * const scope = deadlines.start(req.headers, true, now(), res, req.socket);
 * deadlines.als.run(scope, handle);
 * ```
 */
export function minimumDeadlines<R>(host: MinimumHost<R>): MinimumDeadlines<R> {
  type Scope = RequestScope<R>;
  const als = new AsyncLocalStorage<Scope>();
  // Its own key on a socket: every instance hears every response finish (the benchmark runs one per process, the
  // tests several), and must find only its own requests there.
  const kOpen = Symbol('open');
  const heap: Scope[] = [];
  let timer: NodeJS.Timeout | undefined;
  let timerAt = Number.POSITIVE_INFINITY;
  // Whether the request's logger writes at info: asked once per logger method (reading a function's name is a call).
  let lastInfo: unknown;
  let lastInfoWrites = false;

  const place = (scope: Scope, at: number) => {
    heap[at] = scope;
    scope.at = at;
  };
  const siftUp = (scope: Scope) => {
    let at = scope.at;
    while (at > 0) {
      const parentAt = (at - 1) >> 1;
      const parent = heap[parentAt] as Scope;
      if (parent.dueAt <= scope.dueAt) break;
      place(parent, at);
      at = parentAt;
    }
    place(scope, at);
  };
  const siftDown = (scope: Scope) => {
    let at = scope.at;
    for (;;) {
      let child = 2 * at + 1;
      if (child >= heap.length) break;
      if (child + 1 < heap.length && (heap[child + 1] as Scope).dueAt < (heap[child] as Scope).dueAt) child++;
      const smaller = heap[child] as Scope;
      if (smaller.dueAt >= scope.dueAt) break;
      place(smaller, at);
      at = child;
    }
    place(scope, at);
  };
  const leave = (scope: Scope) => {
    const at = scope.at;
    if (at < 0) return;
    scope.at = -1;
    const last = heap.pop() as Scope;
    if (at === heap.length) return;
    place(last, at);
    siftDown(last);
    siftUp(last);
  };
  const arm = () => {
    if (timer !== undefined) clearTimeout(timer);
    timerAt = (heap[0] as Scope).dueAt;
    timer = setTimeout(onTimer, Math.max(1, Math.round(timerAt - now())));
    timer.unref();
  };
  const onTimer = () => {
    timer = undefined;
    timerAt = Number.POSITIVE_INFINITY;
    let at = now();
    for (let first = heap[0]; first !== undefined; first = heap[0]) {
      if (first.dueAt > at && first.dueAt > (at = now())) break;
      leave(first);
      first.stopped = true;
      first.outcome = 'deadline_exceeded';
      const response = first.response;
      if (response !== undefined) als.run(first, host.answerDeadline, response);
    }
    if (timer === undefined && heap.length > 0) arm();
  };

  const end = (scope: Scope, finished: boolean) => {
    leave(scope);
    scope.endedAt = now();
    const response = scope.response as R;
    scope.response = undefined;
    if (!finished && scope.outcome === undefined) {
      scope.outcome = 'cancelled';
      scope.stopped = true;
    }
    if (scope.outcome === undefined) scope.outcome = host.raw(response).statusCode >= 500 ? 'error' : 'ok';
    // The end-of-request line: built only for a logger that would write it.
    const log = host.logger(response);
    if (log === undefined) return;
    if (log.info !== lastInfo) {
      lastInfo = log.info;
      lastInfoWrites = log.info.name !== 'noop';
    }
    if (lastInfoWrites) {
      log.info(
        { budgetMs: scope.budgetMs, elapsedMs: scope.endedAt - scope.arrivedAt, outcome: scope.outcome },
        'deadline',
      );
    }
  };
  subscribe('http.server.response.finish', (message) => {
    const { response, socket } = message as { response: ServerResponse; socket: TrackedSocket | null };
    const open = socket?.[kOpen] as Scope[] | undefined;
    if (open === undefined) return;
    for (let i = 0; i < open.length; i++) {
      const scope = open[i] as Scope;
      if (scope.response === undefined || host.raw(scope.response) !== response) continue;
      if (i === 0) open.shift();
      else open.splice(i, 1);
      end(scope, true);
      return;
    }
  });

  const start = (
    headers: IncomingHttpHeaders,
    trusted: boolean,
    arrivedAt: number,
    response: R,
    socket: TrackedSocket,
  ): Scope => {
    let budgetMs = DEFAULT_MS;
    const ours = milliseconds(headers['x-request-deadline']);
    let best = ours;
    let source = ours >= 0 ? 0 : -1;
    if (
      headers['grpc-timeout'] !== undefined ||
      headers['connect-timeout-ms'] !== undefined ||
      headers['x-envoy-expected-rq-timeout-ms'] !== undefined ||
      headers['x-request-deadline-at'] !== undefined
    ) {
      [best, source] = otherBudgets(headers, ours);
    }
    // Any caller may shorten the default; only a trusted one lengthen it.
    if (best >= 0 && (trusted || best <= DEFAULT_MS)) budgetMs = Math.min(best, MAX_MS);
    else source = -1;
    const registry = (globalThis as { [OTEL_REGISTRY]?: { context?: unknown } })[OTEL_REGISTRY];
    // With OpenTelemetry, its server span is the trace (not counted here: none is registered).
    const header = registry?.context === undefined ? headers.traceparent : undefined;
    const scope: Scope = {
      arrivedAt,
      dueAt: arrivedAt + budgetMs,
      budgetMs,
      source,
      traceparent: typeof header === 'string' ? header : undefined,
      at: heap.length,
      stopped: false,
      endedAt: -1,
      outcome: undefined,
      response,
    };
    heap.push(scope);
    siftUp(scope);
    if (scope.at === 0 && scope.dueAt < timerAt) arm();
    const open = socket[kOpen] as Scope[] | undefined;
    if (open === undefined) {
      const list = [scope];
      socket[kOpen] = list as RequestScope<unknown>[];
      socket.prependOnceListener('close', () => {
        for (const left of list.splice(0)) end(left, false);
      });
    } else {
      open.push(scope);
    }
    return scope;
  };
  return { als, start };
}
