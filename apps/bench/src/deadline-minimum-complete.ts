/**
 * The least a deadline adapter for fastify can do per request while doing what `@deadline/fastify` promises, by
 * hand and in one file, for the instruction counts. Beside what deadline-minimum.ts does (the arrival on the
 * monotonic clock, a context in AsyncLocalStorage, a 504 from one shared timer, the response's end and the
 * client's leaving heard), it does the rest of the model, each part as cheaply as it can be written:
 * - every budget header the library understands is looked at (ours, `grpc-timeout`, `Connect-Timeout-Ms`,
 *   Envoy's; the absolute form is looked for and refused, as by default); the smallest valid one wins, clamped
 *   to the route's maximum;
 * - the caller is asked about only through a `trust` predicate when the service gave one;
 * - the caller's `traceparent` is kept (parsed only when read), and OpenTelemetry's registry is looked at;
 * - deadlines may come in any order: a binary heap, and a request that ends leaves it (the core's expiry queue
 *   written again on purpose: calling it would count the library's code, not the least one can write);
 * - the request's end records when it ended (for calls that outlive it), its outcome, and asks its logger whether
 *   a line would be written;
 * - `request.deadline` is set, and `preValidation` re-enters the context when a hook of the app's left it.
 * It leaves out what needs no code on this path (errors, checks of options, route limits: no route has any here).
 * A count of it is a floor under any adapter that keeps those promises, not a design.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { subscribe } from 'node:diagnostics_channel';
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

interface RequestScope {
  readonly arrivedAt: number;
  readonly dueAt: number;
  readonly budgetMs: number;
  /** Which header the budget came from (its index in HEADERS), or -1 for the default. */
  readonly source: number;
  /** The caller's `traceparent`, parsed only if something reads the trace. */
  readonly traceparent: string | undefined;
  /** Index in the heap while waiting for its deadline, -1 otherwise. */
  at: number;
  stopped: boolean;
  endedAt: number;
  outcome: 'ok' | 'error' | 'deadline_exceeded' | 'cancelled' | undefined;
  /** Dropped when the response is over: the scope may outlive it (calls left running), its request must not. */
  reply: FastifyReply | undefined;
}

const DEFAULT_MS = 30_000;
const MAX_MS = 2_147_483_647;
const OTEL_REGISTRY = Symbol.for('opentelemetry.js.api.1');
const kOpen = Symbol('open');
type TrackedSocket = Socket & { [kOpen]?: RequestScope[] };

/** Milliseconds on the monotonic clock (process.hrtime: Node 20's cheapest read). */
function now(): number {
  const [seconds, nanoseconds] = process.hrtime();
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
function otherBudgets(request: FastifyRequest, ours: number): [number, number] {
  const headers = request.headers;
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
 * Adds the complete minimal deadline hooks to `app`.
 *
 * @example
 * ```ts
 * const app = Fastify();
 * addCompleteDeadlineMinimum(app);
 * app.get('/', async () => ({ hello: 'world' }));
 * ```
 */
export function addCompleteDeadlineMinimum(app: FastifyInstance, trust?: (request: FastifyRequest) => boolean): void {
  const als = new AsyncLocalStorage<RequestScope>();
  const heap: RequestScope[] = [];
  let timer: NodeJS.Timeout | undefined;
  let timerAt = Number.POSITIVE_INFINITY;
  let chainInContext: RequestScope | undefined;
  // Whether the request's logger writes at info: asked once per logger method (reading a function's name is a call).
  let lastInfo: unknown;
  let lastInfoWrites = false;

  const place = (scope: RequestScope, at: number) => {
    heap[at] = scope;
    scope.at = at;
  };
  const siftUp = (scope: RequestScope) => {
    let at = scope.at;
    while (at > 0) {
      const parentAt = (at - 1) >> 1;
      const parent = heap[parentAt] as RequestScope;
      if (parent.dueAt <= scope.dueAt) break;
      place(parent, at);
      at = parentAt;
    }
    place(scope, at);
  };
  const siftDown = (scope: RequestScope) => {
    let at = scope.at;
    for (;;) {
      let child = 2 * at + 1;
      if (child >= heap.length) break;
      if (child + 1 < heap.length && (heap[child + 1] as RequestScope).dueAt < (heap[child] as RequestScope).dueAt) {
        child++;
      }
      const smaller = heap[child] as RequestScope;
      if (smaller.dueAt >= scope.dueAt) break;
      place(smaller, at);
      at = child;
    }
    place(scope, at);
  };
  const leave = (scope: RequestScope) => {
    const at = scope.at;
    if (at < 0) return;
    scope.at = -1;
    const last = heap.pop() as RequestScope;
    if (at === heap.length) return;
    place(last, at);
    siftDown(last);
    siftUp(last);
  };
  const arm = () => {
    if (timer !== undefined) clearTimeout(timer);
    timerAt = (heap[0] as RequestScope).dueAt;
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
      const reply = first.reply;
      if (reply !== undefined && !reply.sent)
        als.run(first, () => reply.code(504).send({ error: 'deadline exceeded' }));
    }
    if (timer === undefined && heap.length > 0) arm();
  };

  const end = (scope: RequestScope, finished: boolean) => {
    leave(scope);
    scope.endedAt = now();
    const reply = scope.reply as FastifyReply;
    scope.reply = undefined;
    if (!finished && scope.outcome === undefined) {
      scope.outcome = 'cancelled';
      scope.stopped = true;
    }
    if (scope.outcome === undefined) {
      const status = reply.raw.statusCode;
      scope.outcome = status >= 500 ? 'error' : 'ok';
    }
    // The end-of-request line: built only for a logger that would write it.
    const log = reply.request.log;
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
    const open = socket?.[kOpen];
    if (open === undefined) return;
    for (let i = 0; i < open.length; i++) {
      const scope = open[i] as RequestScope;
      if (scope.reply?.raw !== response) continue;
      if (i === 0) open.shift();
      else open.splice(i, 1);
      end(scope, true);
      return;
    }
  });

  app.decorateRequest('deadline', null);
  app.addHook('onRequest', (request, reply, next) => {
    const arrivedAt = now();
    const headers = request.headers;
    let budgetMs = DEFAULT_MS;
    let source = -1;
    if (trust === undefined || trust(request)) {
      const ours = milliseconds(headers['x-request-deadline']);
      let best = ours;
      source = ours >= 0 ? 0 : -1;
      if (
        headers['grpc-timeout'] !== undefined ||
        headers['connect-timeout-ms'] !== undefined ||
        headers['x-envoy-expected-rq-timeout-ms'] !== undefined ||
        headers['x-request-deadline-at'] !== undefined
      ) {
        [best, source] = otherBudgets(request, ours);
      }
      if (best >= 0) budgetMs = Math.min(best, MAX_MS);
    }
    const registry = (globalThis as { [OTEL_REGISTRY]?: { context?: unknown } })[OTEL_REGISTRY];
    // With OpenTelemetry, its server span is the trace (not counted here: none is registered).
    const header = registry?.context === undefined ? headers.traceparent : undefined;
    const traceparent = typeof header === 'string' ? header : undefined;
    const scope: RequestScope = {
      arrivedAt,
      dueAt: arrivedAt + budgetMs,
      budgetMs,
      source,
      traceparent,
      at: heap.length,
      stopped: false,
      endedAt: -1,
      outcome: undefined,
      reply,
    };
    heap.push(scope);
    siftUp(scope);
    if (scope.at === 0 && scope.dueAt < timerAt) arm();
    const socket = request.raw.socket as TrackedSocket;
    const open = socket[kOpen];
    if (open === undefined) {
      const list = [scope];
      socket[kOpen] = list;
      socket.prependOnceListener('close', () => {
        for (const left of list.splice(0)) end(left, false);
      });
    } else {
      open.push(scope);
    }
    (request as { deadline?: unknown }).deadline = scope;
    const outer = chainInContext;
    chainInContext = scope;
    try {
      als.run(scope, next);
    } finally {
      chainInContext = outer;
    }
  });
  app.addHook('preValidation', (request, _reply, next) => {
    const scope = (request as { deadline?: RequestScope | null }).deadline;
    if (scope == null || scope === chainInContext || als.getStore() === scope) next();
    else als.run(scope, next);
  });
}
