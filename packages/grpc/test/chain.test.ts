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
import {
  client,
  events,
  type InventoryClient,
  leftAfter,
  next,
  type Seen,
  type Served,
  serve,
  unary,
} from './support.ts';

const available = await requireService(POSTGRES);

/** The budget the edge is given. */
const EDGE_MS = 2_000;
/** What the edge keeps of it for its own answer when it calls the service (its client's margin). */
const EDGE_MARGIN_MS = 20;
/**
 * What the service keeps of its budget to answer in: its statement is cut that much before its own deadline, so
 * that its answer (naming it) reaches the edge before the edge's own timer for the call fires. A second: the answer
 * takes a few ms, but the edge's timer and the service's run on one event loop here, and a stall of more than the
 * margin around the cut (100 ms was seen on a loaded machine) would have the edge's timer fire first.
 */
const SERVICE_MARGIN_MS = 1_000;
/** When the statement is cut, after the edge got the request. */
const CUT_AFTER_MS = EDGE_MS - EDGE_MARGIN_MS - SERVICE_MARGIN_MS;
/**
 * How early the watch of pg_stat_activity may place the statement's end: it reads the server's clock in the middle
 * of a round trip, off by half of one, and a loaded server takes its time to answer.
 */
const WATCH_SLACK_MS = 200;
/** How long the statement runs by itself (its `pg_sleep(5)`): a cut one is gone well before. */
const STATEMENT_MS = 5_000;

describe.runIf(available)('fastify → gRPC → PostgreSQL', () => {
  let pool: pg.Pool;
  let activity: ServerActivity;
  let inventory: Served;
  let stock: InventoryClient;
  let gateway: FastifyInstance;
  let url: string;
  const serverErrors: (string | undefined)[] = [];

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2, application_name: `deadline-grpc-${process.pid}` });
    // What the server answered each statement with, read off the connections (its ErrorResponse codes).
    pool.on('connect', (connected) => {
      const connection = (connected as unknown as { connection: NodeJS.EventEmitter }).connection;
      connection.on('errorMessage', (message: { code?: string }) => serverErrors.push(message.code));
    });
    activity = await ServerActivity.open();
    const db = pgWithDeadline(pool, { name: 'inventory-db', marginMs: SERVICE_MARGIN_MS });
    inventory = await serve({ serviceName: 'inventory' }, (sql) => db.query(sql));
    stock = client(inventory.address, { marginMs: EDGE_MARGIN_MS });
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
    const started = performance.now();
    const response = await request(`${url}/budget`, { headers: { 'x-request-deadline': String(EDGE_MS) } });
    const seen = (await response.body.json()) as Seen;
    expect(response.statusCode).toBe(200);
    expect(seen.hop).toBe('inventory');
    expect(seen.budgetMs).toBeLessThanOrEqual(EDGE_MS - EDGE_MARGIN_MS);
    expect(seen.budgetMs).toBeGreaterThanOrEqual(leftAfter(EDGE_MS, started, EDGE_MARGIN_MS));
  });

  it('the statement is cancelled on the server at the deadline, and the edge answers 504 naming the hop', async () => {
    const m = marker();
    const failed = next<unknown>('query-error');
    const sent = performance.now();
    const pending = request(`${url}/query`, {
      query: { sql: `SELECT pg_sleep(${STATEMENT_MS / 1_000}) /* ${m} */` },
      headers: { 'x-request-deadline': String(EDGE_MS) },
    });
    await activity.startedRunning(m);
    const gone = await activity.goneAt(m);
    const response = await pending;
    const body = await response.body.text();
    // The edge's budget less its margin and the service's: cut near CUT_AFTER_MS after the request left, not after
    // the 5 s it asked for.
    expect(gone - sent).toBeGreaterThan(CUT_AFTER_MS - WATCH_SLACK_MS);
    expect(gone - sent).toBeLessThan(STATEMENT_MS - 1_000);
    expect(response.statusCode).toBe(504);
    expect(response.headers['x-deadline-exceeded-by']).toBe('inventory');
    // The handler's error is this deadline; what ended the statement on the server is our cancel: the server answered
    // it 57014. The error carries that answer as its cause when it came within the 50 ms the pg adapter waits for it;
    // a loaded server may answer later, the error then being the deadline alone.
    const error = await failed;
    const typed = findDeadlineError(error) as DeadlineExceededError;
    expect(typed).toBeInstanceOf(DeadlineExceededError);
    expect(typed.target).toBe('inventory-db');
    await expect.poll(() => serverErrors).toContain('57014');
    expect([undefined, '57014']).toContain((typed.cause as { code?: string } | undefined)?.code);
    expect(body).toContain('inventory');
    expect(await activity.running(m)).toBe(false);
    events.removeAllListeners('query-error');
  });
});
