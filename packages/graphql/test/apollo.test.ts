/**
 * Apollo Server 5 with `deadlineApolloPlugin`, mounted the three ways its users mount it: `startStandaloneServer` (the
 * plugin starts each request's deadline), `@as-integrations/express5` behind `@deadline/express`, and
 * `@as-integrations/fastify` behind `@deadline/fastify` (the hop's deadline, answered by Apollo).
 */
import type { AddressInfo } from 'node:net';
import { ApolloServer } from '@apollo/server';
import { startStandaloneServer } from '@apollo/server/standalone';
import { expressMiddleware } from '@as-integrations/express5';
import fastifyApollo, { fastifyApolloDrainPlugin } from '@as-integrations/fastify';
import express from 'express';
import fastify from 'fastify';
import pino from 'pino';
import { deadline } from '../../express/src/index.ts';
import { fastifyDeadline } from '../../fastify/src/index.ts';
import { closeServer, type LogLine, memoryDestination } from '../../server/test/harness.ts';
import { deadlineApolloPlugin } from '../src/apollo.ts';
import { graphqlDeadlineAnswer } from '../src/index.ts';
import { type GraphQLHarness, graphqlConformance, SERVICE, type SuiteApp, type SuiteContext } from './conformance.ts';

const HOP = { serviceName: SERVICE, defaultMs: 2_000, answer: graphqlDeadlineAnswer };

function apollo(app: SuiteApp, logs: LogLine[], pluginOptions?: object) {
  return new ApolloServer<SuiteContext>({
    typeDefs: app.typeDefs,
    resolvers: app.resolvers as never,
    allowBatchedHttpRequests: true,
    logger: pino({ level: 'info' }, memoryDestination(logs)),
    plugins: [deadlineApolloPlugin<SuiteContext>(pluginOptions)],
  });
}

const standalone: GraphQLHarness = {
  name: 'apollo standalone',
  async start(app) {
    const logs: LogLine[] = [];
    const server = apollo(app, logs, { ...HOP, logger: pino({ level: 'info' }, memoryDestination(logs)) });
    const { url } = await startStandaloneServer(server, {
      listen: { port: 0, host: '127.0.0.1' },
      context: async () => app.context(),
    });
    return { url, logs, close: () => server.stop() };
  },
};

const onExpress: GraphQLHarness = {
  name: 'apollo on express 5',
  async start(app) {
    const logs: LogLine[] = [];
    const server = apollo(app, logs);
    await server.start();
    const web = express();
    web.use(
      '/graphql',
      deadline({ ...HOP, logger: pino({ level: 'info' }, memoryDestination(logs)) }),
      express.json(),
      expressMiddleware(server, { context: async () => app.context() }),
    );
    const listening = await new Promise<ReturnType<typeof web.listen>>((resolve) => {
      const s = web.listen(0, '127.0.0.1', () => resolve(s));
    });
    const { port } = listening.address() as AddressInfo;
    return {
      url: `http://127.0.0.1:${port}/graphql`,
      logs,
      close: async () => {
        await closeServer(listening);
        await server.stop();
      },
    };
  },
};

const onFastify: GraphQLHarness = {
  name: 'apollo on fastify',
  async start(app) {
    const logs: LogLine[] = [];
    const web = fastify({ loggerInstance: pino({ level: 'info' }, memoryDestination(logs)) });
    const server = apollo(app, logs);
    server.addPlugin(fastifyApolloDrainPlugin(web));
    await server.start();
    await web.register(fastifyDeadline, HOP);
    await web.register(fastifyApollo(server), { context: async () => app.context() });
    const url = await web.listen({ port: 0, host: '127.0.0.1' });
    return {
      url: `${url}/graphql`,
      logs,
      close: async () => {
        await web.close();
        await server.stop();
      },
    };
  },
};

for (const harness of [standalone, onExpress, onFastify]) graphqlConformance(harness);
