/**
 * One budget across fastify → gRPC → PostgreSQL, each hop in its own server on loopback: the budget the edge
 * gets arrives at the gRPC handler (less the edge's margin), the statement the handler runs is cancelled on the
 * server at the deadline, and the edge answers 504 naming the hop whose deadline fired.
 */
import { DeadlineExceededError, findDeadlineError } from '@deadline/core';
import fastifyDeadline from '@deadline/fastify';
import { withDeadline as pgWithDeadline } from '@deadline/pg';
import Fastify, { type FastifyInstance } from 'fastify';
import pg from 'pg';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { marker, ServerActivity } from '../../pg/test/support/activity.ts';
import { client, events, type InventoryClient, next, type Seen, type Served, serve, unary } from './support.ts';

const available = await requireService(POSTGRES);

describe.runIf(available)('fastify → gRPC → PostgreSQL', () => {
  let pool: pg.Pool;
  let activity: ServerActivity;
  let inventory: Served;
  let stock: InventoryClient;
  let gateway: FastifyInstance;
  let url: string;

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2, application_name: `deadline-grpc-${process.pid}` });
    activity = await ServerActivity.open();
    // The service keeps 100 ms of its budget to answer in: its statement is cut that much before its own deadline,
    // so its answer (naming it) reaches the edge before the edge's own timer for the call fires.
    const db = pgWithDeadline(pool, { name: 'inventory-db', marginMs: 100 });
    inventory = await serve({ serviceName: 'inventory' }, (sql) => db.query(sql));
    stock = client(inventory.address, { marginMs: 20 });
    gateway = Fastify({ forceCloseConnections: true });
    await gateway.register(fastifyDeadline, { serviceName: 'gateway' });
    gateway.get('/budget', () => unary<Seen>(stock, 'inspect', {}));
    gateway.get<{ Querystring: { sql: string } }>('/query', (req) => unary(stock, 'query', { sql: req.query.sql }));
    url = await gateway.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    await gateway?.close();
    stock?.close();
    await inventory?.close();
    await activity?.end();
    await pool?.end();
  });

  it("the edge's budget arrives at the gRPC handler, less the edge's margin", async () => {
    const response = await request(`${url}/budget`, { headers: { 'x-request-deadline': '1000' } });
    const seen = (await response.body.json()) as Seen;
    expect(response.statusCode).toBe(200);
    expect(seen.hop).toBe('inventory');
    expect(seen.budgetMs).toBeLessThanOrEqual(980);
    expect(seen.budgetMs).toBeGreaterThan(600);
  });

  it('the statement is cancelled on the server at the deadline, and the edge answers 504 naming the hop', async () => {
    const m = marker();
    const failed = next<unknown>('query-error');
    const sent = performance.now();
    const pending = request(`${url}/query`, {
      query: { sql: `SELECT pg_sleep(5) /* ${m} */` },
      headers: { 'x-request-deadline': '600' },
    });
    await activity.startedRunning(m);
    const gone = await activity.goneAt(m);
    const response = await pending;
    const body = await response.body.text();
    // 600 ms less the edge's margin (20) and the service's (100): cut near 480 ms after the request left, not after
    // the 5 s it asked for.
    expect(gone - sent).toBeGreaterThan(380);
    expect(gone - sent).toBeLessThan(1_500);
    expect(response.statusCode).toBe(504);
    expect(response.headers['x-deadline-exceeded-by']).toBe('inventory');
    // The handler's error is the statement's cancellation on the server (57014), explained as this deadline.
    const error = await failed;
    const typed = findDeadlineError(error) as DeadlineExceededError;
    expect(typed).toBeInstanceOf(DeadlineExceededError);
    expect(typed.target).toBe('inventory-db');
    expect(typed.cause).toMatchObject({ code: '57014' });
    expect(body).toContain('inventory');
    expect(await activity.running(m)).toBe(false);
    events.removeAllListeners('query-error');
  });
});
