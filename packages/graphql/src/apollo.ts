/**
 * `@deadline/graphql/apollo` — Apollo Server 5's plugin: every resolver under the request's deadline, a partial
 * answer at the deadline, `X-Deadline-Exceeded-By` on answers a deadline cut. Works behind `@deadline/express` or
 * `@deadline/fastify` (`@as-integrations/express5`, `@as-integrations/fastify`) and with `startStandaloneServer`,
 * where it starts each request's deadline itself.
 * @packageDocumentation
 */
import type { ApolloServerPlugin, BaseContext } from '@apollo/server';
import { DeadlineExceededError, findDeadlineError } from '@deadline/core';
import { DEADLINE_EXCEEDED_BY_HEADER } from '@deadline/core/wire';
import type { RequestState } from '@deadline/server/internal';
import { requestDeadlineError } from './field-error.js';
import { type GraphQLDeadlineOptions, graphqlHop } from './graphql-hop.js';
import { instrumentSchema } from './instrument-schema.js';

export type { GraphQLDeadlineOptions } from './graphql-hop.js';

/**
 * Apollo Server's deadline plugin. Each operation's resolvers run inside its request's deadline context (their
 * queries and calls bounded by it, cancelled when it passes or the client leaves); a field still running at the
 * deadline is answered at once with a `DEADLINE_EXCEEDED` error beside the data already resolved (200, as
 * GraphQL-over-HTTP has partial answers); a request the deadline cut carries `X-Deadline-Exceeded-By` and is logged
 * `deadline_exceeded`.
 *
 * @example
 * ```ts
 * import { ApolloServer } from '@apollo/server';
 * import { startStandaloneServer } from '@apollo/server/standalone';
 * import { deadlineApolloPlugin } from '@deadline/graphql/apollo';
 *
 * const server = new ApolloServer({ typeDefs, resolvers, plugins: [deadlineApolloPlugin({ serviceName: 'catalog', defaultMs: 2_000 })] });
 * await startStandaloneServer(server, { listen: { port: 4000 } });
 * ```
 */
export function deadlineApolloPlugin<TContext extends BaseContext = BaseContext>(
  options?: GraphQLDeadlineOptions,
): ApolloServerPlugin<TContext> {
  const hop = graphqlHop(options);
  return {
    async contextCreationDidFail({ error }) {
      answerAsDeadline(error, hop.stateNow());
    },
    async requestDidStart(requestContext) {
      instrumentSchema(requestContext.schema);
      const state = hop.stateNow();
      if (state === undefined) return;
      return {
        async willSendResponse({ response }) {
          if (state.outcome !== 'deadline_exceeded' || state.exceededBy === undefined) return;
          response.http.headers.set(DEADLINE_EXCEEDED_BY_HEADER, state.exceededBy);
        },
      };
    },
  };
}

/**
 * A deadline error the app's `context` function failed with (its calls bounded by the hop's deadline): Apollo answers
 * a failed context creation 500 with the error's message, unless the error's `extensions.http` says otherwise, and
 * gives the plugins only a look at the error first. So the error is given what Apollo reads: 504 naming whose
 * deadline fired, `DEADLINE_EXCEEDED`, and a message (and stack) without the internal target's name.
 */
function answerAsDeadline(error: Error, state: RequestState | undefined): void {
  const typed = findDeadlineError(error);
  if (typed === undefined) return;
  state?.recordError(typed);
  // A cancellation: its client left, nobody reads the answer.
  if (!(typed instanceof DeadlineExceededError)) return;
  const exceededBy = typed.hop ?? state?.options.hop ?? 'service';
  const { message, extensions } = requestDeadlineError(exceededBy);
  Object.assign(error, {
    message,
    stack: `${error.name}: ${message}`,
    extensions: {
      ...extensions,
      http: { status: 504, headers: new Map([[DEADLINE_EXCEEDED_BY_HEADER, exceededBy]]) },
    },
  });
}
