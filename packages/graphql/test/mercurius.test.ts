/**
 * Mercurius 16 behind `@deadline/fastify`, with `mercuriusDeadline` registered after it (the hop's deadline, answered
 * by Mercurius), its batched queries and automatic persisted queries on.
 */
import fastify from 'fastify';
import mercurius from 'mercurius';
import pino from 'pino';
import { fastifyDeadline } from '../../fastify/src/index.ts';
import { type LogLine, memoryDestination } from '../../server/test/harness.ts';
import { graphqlDeadlineAnswer } from '../src/index.ts';
import { mercuriusDeadline } from '../src/mercurius.ts';
import { type GraphQLHarness, graphqlConformance, SERVICE } from './conformance.ts';

const onFastify: GraphQLHarness = {
  name: 'mercurius',
  async start(app) {
    const logs: LogLine[] = [];
    const web = fastify({ loggerInstance: pino({ level: 'info' }, memoryDestination(logs)) });
    await web.register(fastifyDeadline, { serviceName: SERVICE, defaultMs: 2_000, answer: graphqlDeadlineAnswer });
    await web.register(mercurius, {
      schema: app.typeDefs,
      resolvers: app.resolvers as never,
      context: () => app.context(),
      allowBatchedQueries: true,
      persistedQueryProvider: mercurius.persistedQueryDefaults.automatic(),
    });
    await web.register(mercuriusDeadline);
    const url = await web.listen({ port: 0, host: '127.0.0.1' });
    return { url: `${url}/graphql`, logs, close: () => web.close() };
  },
};

graphqlConformance(onFastify);
