/**
 * Where a GraphQL operation's deadline comes from: the server hop it runs inside (express, fastify, `deadlineHandler`),
 * or, on a GraphQL server that owns its HTTP server, a hop started for its request when the operation reaches the
 * plugin (anchored when the request arrived). Either way the request's deadline answer becomes the GraphQL server's:
 * it answers with the data resolved so far, and the hop answers for it (GraphQL-shaped) only if that does not come.
 */
import type { IncomingMessage } from 'node:http';
import { currentContext, type DeadlineExceededError, InvalidArgumentError } from '@deadline/core';
import { checkNumber, checkObject } from '@deadline/core/internal';
import { DEADLINE_EXCEEDED_BY_HEADER } from '@deadline/core/wire';
import type { DeadlineAnswer, DeadlineAnswerDetails, DeadlineServerOptions, LineLogger } from '@deadline/server';
import {
  createParser,
  type DeadlineAnswerClaim,
  isTrusted,
  type RequestState,
  rawHost,
  requestStateOf,
  resolveBudget,
  resolveOptions,
  startRequest,
} from '@deadline/server/internal';
import { requestDeadlineError } from './field-error.js';
import { currentSlot, listenForRequests } from './request-slots.js';

/**
 * Options of the GraphQL plugins. The server options apply where the plugin starts the request's deadline itself (a
 * server that owns its HTTP server: Apollo's `startStandaloneServer`, graphql-yoga on `createServer`); behind a
 * server hop (`@deadline/express`, `@deadline/fastify`, `deadlineHandler`) that hop's options apply.
 *
 * @example
 * ```ts
 * const options: GraphQLDeadlineOptions = { serviceName: 'catalog', defaultMs: 2_000, logger: pino() };
 * ```
 */
export interface GraphQLDeadlineOptions extends Omit<DeadlineServerOptions<IncomingMessage>, 'admission'> {
  /** Logger for the end-of-request line, where the plugin starts the request's deadline. Default: none. */
  logger?: LineLogger | undefined;
  /**
   * How long after the deadline the hop waits for the server's own answer (the data resolved so far) before it
   * answers for it without data, in ms. The fields in flight are cut at the deadline, so the answer usually goes
   * out within a millisecond or two. Default 100.
   */
  answerGraceMs?: number | undefined;
}

/** The deadline of each operation's request, as a plugin finds it. @internal */
export interface GraphQLHop {
  /** The request's state for the operation running now: the surrounding hop's, or one started for it. */
  stateNow(): RequestState | undefined;
}

/**
 * `ownsRequests`: whether the server may own its HTTP server (then each `node:http` request gets a slot); false for
 * Mercurius, always behind `@deadline/fastify`.
 * @internal
 */
export function graphqlHop(options: GraphQLDeadlineOptions | undefined, ownsRequests = true): GraphQLHop {
  // A server the plugin starts requests for has read their body by then: admission belongs before it.
  if ((options as { admission?: unknown } | undefined)?.admission !== undefined) {
    throw new InvalidArgumentError(
      'admission',
      "unset: a GraphQL plugin starts a request once its body is read; put admission on the server hop in front (@deadline/express, @deadline/fastify, @deadline/server's deadlineHandler)",
      (options as { admission?: unknown }).admission,
    );
  }
  const resolved = resolveOptions<IncomingMessage>(options);
  const logger = checkObject('logger', options?.logger) as LineLogger | undefined;
  const graceMs = checkNumber('answerGraceMs', options?.answerGraceMs, { min: 0 }) ?? 100;
  const claim: DeadlineAnswerClaim = { graceMs, answer: graphqlDeadlineAnswer };
  const host = rawHost(logger);
  const parser = createParser(resolved as never);
  const admitAll = { ...resolved.limits, minMs: 0 };
  // Only a plugin whose server may own its HTTP server needs the slots: every node:http request pays for one.
  if (ownsRequests) listenForRequests();
  return {
    stateNow(): RequestState | undefined {
      const context = currentContext();
      if (context !== undefined) {
        const state = requestStateOf(context);
        if (state !== undefined) state.claim ??= claim;
        return state;
      }
      const slot = currentSlot();
      if (slot === undefined) return undefined;
      if (slot.state === undefined) {
        const { req, res } = slot;
        const headers = req.headers;
        const trusted = isTrusted(resolved.trust, req, logger, resolved.hop);
        const budget = resolveBudget(headers, trusted, parser, resolved.limits);
        // Admitted once claimed: a budget below the minimum is refused in GraphQL's shape too.
        const state = startRequest(req, res, headers, resolved as never, host, budget, slot.arrivedAt, admitAll);
        state.claim = claim;
        slot.state = state;
        if (state.outcome === undefined) state.admit(resolved.limits.minMs);
      }
      return slot.state;
    },
  };
}

/**
 * A GraphQL endpoint's deadline answer when nothing ran — the budget was below the route's minimum, or the server
 * gave no answer in time: a GraphQL response with one error and no data, 504 (GraphQL over HTTP's status for a
 * request that was not executed, by a gateway's timeout), naming whose deadline fired. The plugins give it on the
 * requests they see; for a refusal before the GraphQL server runs, set it as the hop's `answer`.
 *
 * @example
 * ```ts
 * app.use('/graphql', deadline({ serviceName: 'catalog', answer: graphqlDeadlineAnswer }), expressMiddleware(server));
 * ```
 */
export function graphqlDeadlineAnswer(error: DeadlineExceededError, details: DeadlineAnswerDetails): DeadlineAnswer {
  const exceededBy = error.hop ?? details.hop;
  return {
    statusCode: 504,
    headers: { 'content-type': 'application/json; charset=utf-8', [DEADLINE_EXCEEDED_BY_HEADER]: exceededBy },
    body: JSON.stringify({ errors: [requestDeadlineError(exceededBy)] }),
  };
}
