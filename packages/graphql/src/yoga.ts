/**
 * `@deadline/graphql/yoga` — graphql-yoga's plugin: every resolver under the request's deadline, a partial answer at
 * the deadline, `X-Deadline-Exceeded-By` on answers a deadline cut. Works on `createServer(yoga)` (it starts each
 * request's deadline itself) and behind `@deadline/express`, `@deadline/fastify` or `deadlineHandler`.
 * @packageDocumentation
 */
import { currentContext, DeadlineExceededError, findDeadlineError } from '@deadline/core';
import { DEADLINE_EXCEEDED_BY_HEADER } from '@deadline/core/wire';
import type { RequestState } from '@deadline/server/internal';
import { GraphQLError } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { deadlineExecute } from './execute.js';
import { requestDeadlineError } from './field-error.js';
import { type GraphQLDeadlineOptions, graphqlHop } from './graphql-hop.js';
import { instrumentSchema } from './instrument-schema.js';

export type { GraphQLDeadlineOptions } from './graphql-hop.js';

/**
 * graphql-yoga's deadline plugin (an envelop plugin, yoga's `useX` convention). Each operation's resolvers run inside
 * its request's deadline context; a field still running at the deadline is answered at once with a
 * `DEADLINE_EXCEEDED` error beside the data already resolved; a request the deadline cut carries
 * `X-Deadline-Exceeded-By` and is logged `deadline_exceeded`. A subscription's request is long-lived: its setup runs
 * in the context, and no default budget cuts the stream.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http';
 * import { createSchema, createYoga } from 'graphql-yoga';
 * import { useDeadline } from '@deadline/graphql/yoga';
 *
 * const yoga = createYoga({ schema: createSchema({ typeDefs, resolvers }), plugins: [useDeadline({ serviceName: 'catalog' })] });
 * createServer(yoga).listen(4000);
 * ```
 */
export function useDeadline(options?: GraphQLDeadlineOptions): Plugin {
  const hop = graphqlHop(options);
  // The request's state, from the first hook that runs in its handling: the response hook may run outside it.
  const states = new WeakMap<Request, RequestState>();
  return {
    onPluginInit({ registerContextErrorHandler }) {
      // yoga masks whatever the app's context factory throws (500 `Unexpected error.`, logged at error level) unless it
      // is a GraphQLError: a deadline error there becomes the hop's answer, GraphQL-shaped.
      registerContextErrorHandler(({ error, setError }) => {
        const typed = findDeadlineError(error);
        if (typed === undefined) return;
        const state = hop.stateNow();
        state?.recordError(typed);
        // A cancellation: its client left, nobody reads the answer.
        if (!(typed instanceof DeadlineExceededError)) return;
        const exceededBy = typed.hop ?? state?.options.hop ?? 'service';
        const { message, extensions } = requestDeadlineError(exceededBy);
        const http = { status: 504, headers: { [DEADLINE_EXCEEDED_BY_HEADER]: exceededBy } };
        setError(new GraphQLError(message, { extensions: { ...extensions, http } }));
      });
    },
    onRequest({ request }) {
      const state = hop.stateNow();
      if (state !== undefined) states.set(request, state);
    },
    instrumentation: {
      // Where yoga runs outside a hop's context (on `createServer`), the app's context factory runs inside the
      // request's: the calls it makes (a session lookup) are bounded by its deadline, as the resolvers' are.
      context(_payload, build) {
        const state = currentContext() === undefined ? hop.stateNow() : undefined;
        if (state === undefined) build();
        else state.context.run(build);
      },
    },
    onExecute({ args, executeFn, setExecuteFn }) {
      instrumentSchema(args.schema);
      // graphql-js 17's execute (yoga's `useEngine`) takes the deadline as its abortSignal; yoga's own executor
      // ignores the field.
      setExecuteFn(deadlineExecute(executeFn));
    },
    onSubscribe({ args }) {
      instrumentSchema(args.schema);
      const request = (args.contextValue as { request?: Request }).request;
      const state = request === undefined ? undefined : states.get(request);
      state?.makeLongLived();
    },
    onResponse({ request, response }) {
      const state = states.get(request);
      if (state?.outcome !== 'deadline_exceeded' || state.exceededBy === undefined) return;
      response.headers.set(DEADLINE_EXCEEDED_BY_HEADER, state.exceededBy);
    },
  };
}
