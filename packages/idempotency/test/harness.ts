/**
 * The apps and stores the tests run: a real fastify or express server on loopback, with the deadline adapter and
 * the idempotency middleware in front of a handler the test writes, over a real PostgreSQL or Redis store.
 */
import type { AddressInfo } from 'node:net';
import { deadline, deadlineErrors } from '@deadline/express';
import fastifyDeadline from '@deadline/fastify';
import express from 'express';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import pg from 'pg';
import { createClient } from 'redis';
import { POSTGRES, REDIS } from '../../../test/support/services.js';
import {
  fastifyIdempotency,
  type IdempotencyOptions,
  type IdempotencyStore,
  idempotency,
  pgStore,
  redisStore,
} from '../src/index.js';

export type Host = 'fastify' | 'express';
/** `redis` is the Redis store on ioredis, `node-redis` the same store on node-redis. */
export type StoreName = 'pg' | 'redis' | 'node-redis';

/** What a handler answers: status and JSON body. */
export interface Answer {
  status: number;
  body: unknown;
}

/** A route's handler, host-independent: the parsed body and the request's headers. */
export type Handler = (body: unknown, headers: Record<string, string | string[] | undefined>) => Promise<Answer>;

export interface App {
  url: string;
  close(): Promise<void>;
}

/** Server options: `deadline: false` leaves the deadline adapter out (the lock then uses `lockMs`). */
export interface AppOptions {
  deadline?: false | { defaultMs?: number; maxMs?: number };
}

/** Starts `host` on loopback with `POST /orders` (and `PATCH /orders`, `PUT /orders`) answered by `handler`. */
export async function startApp(
  host: Host,
  options: Omit<IdempotencyOptions, 'store'> & { store: IdempotencyStore },
  handler: Handler,
  appOptions: AppOptions = {},
): Promise<App> {
  const limits =
    appOptions.deadline === false ? undefined : { defaultMs: 5_000, maxMs: 30_000, ...appOptions.deadline };
  if (host === 'fastify') {
    const app = Fastify({ forceCloseConnections: true });
    if (limits !== undefined) await app.register(fastifyDeadline, { serviceName: 'orders', ...limits });
    await app.register(fastifyIdempotency, options as never);
    const route = async (
      request: { body: unknown; headers: Record<string, string | string[] | undefined> },
      reply: { code(n: number): unknown },
    ) => {
      const answer = await handler(request.body, request.headers);
      reply.code(answer.status);
      return answer.body;
    };
    for (const method of ['POST', 'PATCH', 'PUT'] as const)
      app.route({ method, url: '/orders', handler: route as never });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    return { url: `http://127.0.0.1:${port}`, close: () => app.close() };
  }
  const app = express();
  if (limits !== undefined) app.use(deadline({ serviceName: 'orders', ...limits }));
  app.use(express.json());
  app.use(idempotency(options as never));
  app.all('/orders', (req, res, next) => {
    handler(req.body, req.headers).then((answer) => res.status(answer.status).json(answer.body), next);
  });
  app.use(deadlineErrors());
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The stores under test, each on its own table or prefix; `end()` drops them. */
export async function openStore(name: StoreName): Promise<{ store: IdempotencyStore; end(): Promise<void> }> {
  const unique = `t${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  if (name === 'pg') {
    const pool = new pg.Pool({ connectionString: POSTGRES.url, max: 10 });
    const table = `deadline_idem_${unique}`;
    return {
      store: pgStore(pool, { table }),
      async end() {
        await pool.query(`DROP TABLE IF EXISTS ${table}`);
        await pool.end();
      },
    };
  }
  const redis = new Redis(REDIS.url);
  const prefix = `deadline:idem:${unique}:`;
  // The store on node-redis, or on the ioredis client that also cleans up.
  const client = name === 'node-redis' ? await createClient({ url: REDIS.url }).connect() : undefined;
  return {
    store: redisStore(client ?? redis, { prefix }),
    async end() {
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
      client?.destroy();
    },
  };
}

/** Sends a JSON request; resolves status, headers and parsed body. */
export async function send(
  url: string,
  {
    method = 'POST',
    key,
    body,
    budgetMs,
    headers = {},
  }: { method?: string; key?: string; body?: unknown; budgetMs?: number; headers?: Record<string, string> },
  // biome-ignore lint/suspicious/noExplicitAny: the tests read the JSON bodies they expect
): Promise<{ status: number; headers: Headers; body: any }> {
  const all: Record<string, string> = { 'content-type': 'application/json', ...headers };
  if (key !== undefined) all['idempotency-key'] = key;
  if (budgetMs !== undefined) all['x-request-deadline'] = String(budgetMs);
  const response = await fetch(`${url}/orders`, { method, headers: all, body: JSON.stringify(body ?? {}) });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, headers: response.headers, body: parsed };
}

/** A promise and its resolver. */
export function deferred<T = void>(): { promise: Promise<T>; resolve(value: T): void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** A store that tells the test when a claim found the key busy. */
export function watched(store: IdempotencyStore, onBusy: () => void): IdempotencyStore {
  return {
    ...store,
    claim: async (input) => {
      const claim = await store.claim(input);
      if (claim.kind === 'busy') onBusy();
      return claim;
    },
    complete: (...args) => store.complete(...args),
    saveStep: (...args) => store.saveStep(...args),
    release: (...args) => store.release(...args),
  };
}
