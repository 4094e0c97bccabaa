/**
 * The least a deadline adapter for fastify can do per request while doing what `@deadline/fastify` promises, by
 * hand, for the instruction counts. Beside what deadline-minimum.ts does (the arrival on the monotonic clock, a
 * context in AsyncLocalStorage, a 504 from one shared timer, the response's end and the client's leaving heard),
 * it does the rest of the model (minimum-deadlines.ts: every budget header, the trace, a heap, the end's outcome
 * and log line), and:
 * - the caller is asked about only through a `trust` predicate when the service gave one;
 * - `request.deadline` is set, and `preValidation` re-enters the context when a hook of the app's left it.
 * It leaves out what needs no code on this path (errors, checks of options, route limits: no route has any here).
 * A count of it is a floor under any adapter that keeps those promises, not a design.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { minimumDeadlines, now, type RequestScope } from './minimum-deadlines.js';

type Scope = RequestScope<FastifyReply>;

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
  const { als, start } = minimumDeadlines<FastifyReply>({
    raw: (reply) => reply.raw,
    answerDeadline: (reply) => {
      if (!reply.sent) reply.code(504).send({ error: 'deadline exceeded' });
    },
    logger: (reply) => reply.request.log,
  });
  let chainInContext: Scope | undefined;

  app.decorateRequest('deadline', null);
  app.addHook('onRequest', (request, reply, next) => {
    const arrivedAt = now();
    const trusted = trust?.(request) ?? false;
    const scope = start(request.headers, trusted, arrivedAt, reply, request.raw.socket);
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
    const scope = (request as { deadline?: Scope | null }).deadline;
    if (scope == null || scope === chainInContext || als.getStore() === scope) next();
    else als.run(scope, next);
  });
}
