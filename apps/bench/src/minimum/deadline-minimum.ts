/**
 * The least a deadline adapter for fastify can do per request, written by hand for the instruction counts: the
 * arrival read on the monotonic clock, one budget header parsed, a context in AsyncLocalStorage (`als.run`), a
 * 504 at the deadline from one shared timer, the response's end heard (Node's diagnostics channel) and the
 * client's leaving heard (one `close` listener per socket). It cuts every corner a library cannot: one header,
 * no trust, no route limits, no trace, no log line, a FIFO that assumes deadlines come in arrival order, ends
 * removed lazily. A count of it is a floor under any deadline adapter's, not a design.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { subscribe } from 'node:diagnostics_channel';
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { now } from './minimum-deadlines.js';

interface Pending {
  expiresAt: number;
  /** Dropped once done: an entry waits in the FIFO until its instant, and must not hold its request that long. */
  reply: FastifyReply | undefined;
  done: boolean;
  next: Pending | undefined;
}

const DEFAULT_MS = 30_000;
const kPending = Symbol('pending');
const kWatched = Symbol('watched');

/**
 * Adds the minimal deadline hook to `app`.
 *
 * @example
 * ```ts
 * const app = Fastify();
 * addDeadlineMinimum(app);
 * app.get('/', async () => ({ hello: 'world' }));
 * ```
 */
export function addDeadlineMinimum(app: FastifyInstance): void {
  const als = new AsyncLocalStorage<Pending>();
  let head: Pending | undefined;
  let tail: Pending | undefined;
  let timer: NodeJS.Timeout | undefined;
  const arm = (at: number) => {
    timer = setTimeout(onTimer, Math.max(1, Math.ceil(at - now())));
    timer.unref();
  };
  const onTimer = () => {
    timer = undefined;
    const at = now();
    while (head !== undefined && (head.done || head.expiresAt <= at)) {
      const due = head;
      head = due.next;
      if (head === undefined) tail = undefined;
      if (!due.done) {
        due.done = true;
        const reply = due.reply as FastifyReply;
        due.reply = undefined;
        if (!reply.sent) reply.code(504).send({ error: 'deadline exceeded' });
      }
    }
    if (head !== undefined) arm(head.expiresAt);
  };
  subscribe('http.server.response.finish', (message) => {
    const pending = ((message as { response: ServerResponse }).response as ServerResponse & { [kPending]?: Pending })[
      kPending
    ];
    if (pending !== undefined) {
      pending.done = true;
      pending.reply = undefined;
    }
  });
  app.addHook('onRequest', (request, reply, next) => {
    const arrivedAt = now();
    const raw = request.headers['x-request-deadline'];
    let budgetMs = DEFAULT_MS;
    if (typeof raw === 'string') {
      const parsed = Number(raw);
      if (parsed >= 0 && parsed <= DEFAULT_MS) budgetMs = parsed;
    }
    const pending: Pending = { expiresAt: arrivedAt + budgetMs, reply, done: false, next: undefined };
    (reply.raw as ServerResponse & { [kPending]?: Pending })[kPending] = pending;
    const socket = request.raw.socket as Socket & { [kWatched]?: boolean };
    if (socket[kWatched] !== true) {
      socket[kWatched] = true;
      // The client left: what is still open on the socket is done (its work would be cancelled here).
      socket.once('close', () => {
        for (let at = head; at !== undefined; at = at.next) {
          if (at.reply?.raw.socket === socket) {
            at.done = true;
            at.reply = undefined;
          }
        }
      });
    }
    if (tail === undefined) head = pending;
    else tail.next = pending;
    tail = pending;
    if (timer === undefined) arm(pending.expiresAt);
    als.run(pending, next);
  });
}
