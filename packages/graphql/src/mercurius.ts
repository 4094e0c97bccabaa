/**
 * `@deadline/graphql/mercurius` — Mercurius's side of the deadline, behind `@deadline/fastify`: every resolver under
 * the request's deadline, a partial answer at the deadline, `X-Deadline-Exceeded-By` on answers a deadline cut.
 * @packageDocumentation
 */
import { DEADLINE_EXCEEDED_BY_HEADER } from '@deadline/core/wire';
import type { RequestState } from '@deadline/server/internal';
import type { FastifyPluginCallback } from 'fastify';
import fp from 'fastify-plugin';
// Mercurius's declarations: `app.graphql` and its hooks.
import type {} from 'mercurius';
import { type GraphQLHop, graphqlHop } from './graphql-hop.js';
import { instrumentSchema } from './instrument-schema.js';

/**
 * Options of {@link mercuriusDeadline}.
 *
 * @example
 * ```ts
 * await app.register(mercuriusDeadline, { answerGraceMs: 50 });
 * ```
 */
export interface MercuriusDeadlineOptions {
  /**
   * How long after the deadline `@deadline/fastify` waits for Mercurius's own answer (the data resolved so far)
   * before answering for it without data, in ms. Default 100.
   */
  answerGraceMs?: number | undefined;
}

/**
 * Mercurius's deadline plugin: register it after `@deadline/fastify` and Mercurius. Each operation's resolvers run
 * inside its request's deadline context (the hop's); a field still running at the deadline is answered at once with
 * a `DEADLINE_EXCEEDED` error beside the data already resolved; a request the deadline cut carries
 * `X-Deadline-Exceeded-By` and is logged `deadline_exceeded`.
 *
 * @example
 * ```ts
 * import { fastifyDeadline } from '@deadline/fastify';
 * import { graphqlDeadlineAnswer } from '@deadline/graphql';
 * import { mercuriusDeadline } from '@deadline/graphql/mercurius';
 * import mercurius from 'mercurius';
 *
 * await app.register(fastifyDeadline, { serviceName: 'catalog', defaultMs: 2_000, answer: graphqlDeadlineAnswer });
 * await app.register(mercurius, { schema, resolvers });
 * await app.register(mercuriusDeadline);
 * ```
 */
export const mercuriusDeadline: FastifyPluginCallback<MercuriusDeadlineOptions> = fp<MercuriusDeadlineOptions>(
  async (app, options) => {
    // The hop is @deadline/fastify's: only the claim's grace is this plugin's.
    const hop: GraphQLHop = graphqlHop({ answerGraceMs: options.answerGraceMs }, false);
    const states = new WeakMap<object, RequestState>();
    app.graphql.addHook('preExecution', async (schema, _document, context) => {
      instrumentSchema(schema);
      const state = hop.stateNow();
      if (state !== undefined) states.set(context.reply, state);
    });
    app.addHook('onSend', async (_request, reply, payload) => {
      const state = states.get(reply);
      if (state?.outcome === 'deadline_exceeded' && state.exceededBy !== undefined) {
        reply.header(DEADLINE_EXCEEDED_BY_HEADER, state.exceededBy);
      }
      return payload;
    });
  },
  { name: '@deadline/graphql/mercurius', fastify: '5.x', dependencies: ['mercurius'] },
);
