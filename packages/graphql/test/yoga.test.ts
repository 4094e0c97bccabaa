/**
 * graphql-yoga 5 with `useDeadline`, mounted the ways its users mount it: `createServer(yoga)` (the plugin starts each
 * request's deadline) and as express middleware behind `@deadline/express` (the hop's deadline, answered by yoga).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { currentContext } from '@deadline/core';
import { useAPQ } from '@graphql-yoga/plugin-apq';
import express from 'express';
import { createSchema, createYoga } from 'graphql-yoga';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deadline } from '../../express/src/index.ts';
import { closeServer, type LogLine, memoryDestination } from '../../server/test/harness.ts';
import { graphqlDeadlineAnswer } from '../src/index.ts';
import { useDeadline } from '../src/yoga.ts';
import { type GraphQLHarness, graphqlConformance, SERVICE, type SuiteApp } from './conformance.ts';

const HOP = { serviceName: SERVICE, defaultMs: 2_000 };

function yoga(app: SuiteApp, logs: LogLine[], pluginOptions?: object) {
  return createYoga({
    schema: createSchema({ typeDefs: app.typeDefs, resolvers: app.resolvers as never }),
    context: () => app.context(),
    batching: true,
    logging: pino({ level: 'info' }, memoryDestination(logs)),
    plugins: [useAPQ(), useDeadline(pluginOptions)],
  });
}

async function listen(server: Server, path: string, logs: LogLine[]) {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}${path}`, logs, close: () => closeServer(server) };
}

const onNode: GraphQLHarness = {
  name: 'yoga on node:http',
  async start(app) {
    const logs: LogLine[] = [];
    const server = createServer(yoga(app, logs, { ...HOP, logger: pino({ level: 'info' }, memoryDestination(logs)) }));
    return listen(server, '/graphql', logs);
  },
};

const onExpress: GraphQLHarness = {
  name: 'yoga on express 5',
  async start(app) {
    const logs: LogLine[] = [];
    const web = express();
    const graphql = yoga(app, logs);
    web.use(
      graphql.graphqlEndpoint,
      deadline({ ...HOP, answer: graphqlDeadlineAnswer, logger: pino({ level: 'info' }, memoryDestination(logs)) }),
      graphql,
    );
    return listen(createServer(web), '/graphql', logs);
  },
};

for (const harness of [onNode, onExpress]) graphqlConformance(harness);

describe('yoga subscriptions over server-sent events', () => {
  const seen: Array<{ inContext: boolean; remainingMs: number | undefined }> = [];
  let running: { url: string; close(): Promise<void> };

  beforeAll(async () => {
    const server = createServer(
      createYoga({
        schema: createSchema({
          typeDefs: 'type Query { up: Boolean } type Subscription { ticks(count: Int!): Int }',
          resolvers: {
            Subscription: {
              ticks: {
                async *subscribe(_: unknown, { count }: { count: number }) {
                  const context = currentContext();
                  seen.push({ inContext: context !== undefined, remainingMs: context?.remainingMs() });
                  for (let tick = 1; tick <= count; tick++) {
                    await new Promise((resolve) => setTimeout(resolve, 100));
                    yield { ticks: tick };
                  }
                },
              },
            },
          },
        }),
        // A default budget shorter than the stream: a subscription is long-lived, never cut by it.
        plugins: [useDeadline({ serviceName: SERVICE, defaultMs: 300 })],
      }),
    );
    running = await listen(server, '/graphql', []);
  });

  afterAll(() => running?.close());

  it('runs past the default budget to its end; its setup ran in the request’s context', async () => {
    const response = await request(running.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query: 'subscription { ticks(count: 6) }' }),
    });
    expect(response.statusCode).toBe(200);
    const text = await response.body.text();
    const ticks = [...text.matchAll(/"ticks":(\d+)/g)].map((match) => Number(match[1]));
    expect(ticks).toEqual([1, 2, 3, 4, 5, 6]);
    expect(text).toContain('event: complete');
    expect(seen).toEqual([{ inContext: true, remainingMs: Number.POSITIVE_INFINITY }]);
  });
});
