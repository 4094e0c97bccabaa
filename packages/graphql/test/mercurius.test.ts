/**
 * Mercurius 16 behind `@deadline/fastify`, with `mercuriusDeadline` registered after it (the hop's deadline, answered
 * by Mercurius), its batched queries and automatic persisted queries on; and its subscriptions over a websocket.
 */
import { once } from 'node:events';
import fastify from 'fastify';
import mercurius from 'mercurius';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
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

describe('mercurius: a subscription over a websocket', () => {
  let close: (() => Promise<unknown>) | undefined;
  let url: string;
  const logs: LogLine[] = [];
  const typeDefs = `type Query { fast: String } type Subscription { ticks: Int }`;

  beforeAll(async () => {
    const web = fastify({ loggerInstance: pino({ level: 'info' }, memoryDestination(logs)) });
    close = () => web.close();
    // A default budget shorter than the stream: a websocket is long-lived, never cut by it.
    await web.register(fastifyDeadline, { serviceName: SERVICE, defaultMs: 300, answer: graphqlDeadlineAnswer });
    await web.register(mercurius, {
      schema: typeDefs,
      resolvers: {
        Query: { fast: () => '1' },
        Subscription: {
          ticks: {
            subscribe: async function* () {
              for (let tick = 1; tick <= 4; tick++) {
                await new Promise((resolve) => setTimeout(resolve, 150));
                yield { ticks: tick };
              }
            },
          },
        },
      } as never,
      subscription: true,
    });
    await web.register(mercuriusDeadline);
    url = (await web.listen({ port: 0, host: '127.0.0.1' })).replace('http', 'ws');
  });

  afterAll(() => close?.());

  it('streams past the default budget, uncut, and queries beside it keep their deadline', async () => {
    const socket = new WebSocket(`${url}/graphql`, 'graphql-transport-ws');
    const messages: { type: string; payload?: { data?: { ticks?: number } } }[] = [];
    socket.on('message', (data) => messages.push(JSON.parse(String(data))));
    await once(socket, 'open');
    socket.send(JSON.stringify({ type: 'connection_init' }));
    await expect.poll(() => messages.some((m) => m.type === 'connection_ack'), { timeout: 5_000 }).toBe(true);
    const startedAt = performance.now();
    socket.send(JSON.stringify({ id: '1', type: 'subscribe', payload: { query: 'subscription { ticks }' } }));
    await expect.poll(() => messages.some((m) => m.type === 'complete'), { timeout: 10_000 }).toBe(true);
    // Four ticks over ~600 ms: twice the default budget, none cut.
    expect(performance.now() - startedAt).toBeGreaterThan(500);
    expect(messages.filter((m) => m.type === 'next').map((m) => m.payload?.data?.ticks)).toEqual([1, 2, 3, 4]);
    expect(messages.filter((m) => m.type === 'error')).toEqual([]);
    socket.close();
    await once(socket, 'close');
    // A query beside it still runs under the hop's budget.
    const answer = await request(`${url.replace('ws', 'http')}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-deadline': '1000' },
      body: JSON.stringify({ query: '{ fast }' }),
    });
    expect(await answer.body.json()).toEqual({ data: { fast: '1' } });
    expect(logs.filter((line) => line.level >= 50)).toEqual([]);
  });
});
