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
import { withDeadline } from '@deadline/pg';
import express from 'express';
import fastify from 'fastify';
import pg from 'pg';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { deadline } from '../../express/src/index.ts';
import { fastifyDeadline } from '../../fastify/src/index.ts';
import { idempotency, pgStore, step } from '../../idempotency/src/index.ts';
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
  contextBeforeDeadline: true,
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

describe('a GraphQL mutation retried with its Idempotency-Key (@deadline/idempotency on express)', () => {
  let pool: pg.Pool;
  let url = '';
  let close: () => Promise<void> = async () => {};
  const table = `deadline_graphql_orders_${process.pid}`;
  const attempts = new Map<string, number>();

  beforeAll(async () => {
    if (!(await requireService(POSTGRES))) return;
    pool = new pg.Pool({ connectionString: POSTGRES.url, max: 4, application_name: `deadline-graphql-${process.pid}` });
    await pool.query(`CREATE TABLE IF NOT EXISTS ${table} (ref text PRIMARY KEY, n serial)`);
    const db = withDeadline(pool, { name: 'orders-db' });
    const server = new ApolloServer({
      typeDefs: 'type Query { up: Boolean } type Mutation { placeOrder(ref: String!): Int }',
      resolvers: {
        Mutation: {
          async placeOrder(_: unknown, { ref }: { ref: string }) {
            const attempt = (attempts.get(ref) ?? 0) + 1;
            attempts.set(ref, attempt);
            // The side effect, once per key: a retry skips it and gets what it recorded.
            const order = await step('insert', async () => {
              const { rows } = await db.query<{ n: number }>(`INSERT INTO ${table} (ref) VALUES ($1) RETURNING n`, [
                ref,
              ]);
              return rows[0]?.n;
            });
            // Slow the first time only (a downstream that was slow), so the first attempt is cut after the insert.
            if (attempt === 1) await db.query('SELECT pg_sleep(5)');
            return order;
          },
        },
      },
      plugins: [deadlineApolloPlugin()],
    });
    await server.start();
    const web = express();
    web.use(
      '/graphql',
      deadline({ ...HOP }),
      express.json(),
      idempotency({ store: pgStore(pool, { table: `${table}_keys` }) }),
      expressMiddleware(server),
    );
    const listening = await new Promise<ReturnType<typeof web.listen>>((resolve) => {
      const s = web.listen(0, '127.0.0.1', () => resolve(s));
    });
    url = `http://127.0.0.1:${(listening.address() as AddressInfo).port}/graphql`;
    close = async () => {
      await closeServer(listening);
      await server.stop();
    };
  });

  afterAll(async () => {
    await close();
    await pool?.query(`DROP TABLE IF EXISTS ${table}, ${table}_keys`);
    await pool?.end();
  });

  it('cut after its insert, retried with the same key: one row, and the retry answers with it', async () => {
    const ref = `ref-${process.pid}-${Date.now()}`;
    const payload = { query: 'mutation ($ref: String!) { placeOrder(ref: $ref) }', variables: { ref } };
    const headers = { 'content-type': 'application/json', 'idempotency-key': `key-${ref}` };
    const first = await request(url, {
      method: 'POST',
      headers: { ...headers, 'x-request-deadline': '400' },
      body: JSON.stringify(payload),
    });
    const cut = (await first.body.json()) as { data: unknown; errors: Array<{ extensions: { code: string } }> };
    expect(cut.data).toEqual({ placeOrder: null });
    expect(cut.errors[0]?.extensions.code).toBe('DEADLINE_EXCEEDED');
    // The retry may wait for the first one's key (released once its steps settled), within its own budget.
    const retry = await request(url, { method: 'POST', headers, body: JSON.stringify(payload) });
    const done = (await retry.body.json()) as { data: { placeOrder: number } };
    const { rows } = await pool.query<{ n: number }>(`SELECT n FROM ${table} WHERE ref = $1`, [ref]);
    expect(rows).toHaveLength(1);
    expect(done.data.placeOrder).toBe(rows[0]?.n);
    expect(attempts.get(ref)).toBe(2);
  });
});
