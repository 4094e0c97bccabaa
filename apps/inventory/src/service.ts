/**
 * inventory — the last hop of the demo chain (fastify + `@deadline/fastify` + `@deadline/pg`, or `@deadline/mysql`
 * on MariaDB). A stock lookup is a query that takes as long as the caller asks (`?workMs=`), so "did the work
 * stop?" can be seen on the database itself: with the library the query is cancelled on the server (Postgres) or
 * killed (MariaDB) when the request's budget runs out.
 */
import { currentContext, isDeadlineError } from '@deadline/core';
import fastifyDeadline, { type FastifyDeadlineOptions } from '@deadline/fastify';
import { withDeadline as withMysql } from '@deadline/mysql';
import { withDeadline } from '@deadline/pg';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Pool as MysqlPool, RowDataPacket } from 'mysql2/promise';
import type pg from 'pg';
import type { Logger } from 'pino';

/** What inventory saw of one request: the budget it was given, and whether its work finished. */
export interface InventoryReport {
  traceId: string | undefined;
  /** The demo's own request id (`?rid=`), which survives hops that do not propagate the trace. */
  rid: string | undefined;
  /** The budget this hop ran with (ms), after re-anchoring what the caller sent. */
  budgetMs: number | undefined;
  /** Where it came from: the header that carried it, or `default`. */
  budgetSource: string | undefined;
  outcome: 'finished' | 'stopped' | 'failed';
  /** How long the work ran, from the request's arrival (ms). */
  workedMs: number;
  /** When the work ended (performance.now() of this process). */
  endedAt: number;
}

export interface InventoryOptions {
  /** Where to listen. Default: an ephemeral port on loopback. */
  port?: number | undefined;
  host?: string | undefined;
  /** The Postgres pool the stock queries run on (wrapped here with `@deadline/pg`), unless `mariadb` is given. */
  pool?: pg.Pool | undefined;
  /**
   * A mysql2 promise pool on MariaDB (or MySQL) to run the stock queries on instead (wrapped here with
   * `@deadline/mysql`): `SLEEP()` stands for the slow query, and a stopped one is killed on the server. With both
   * `pool` and `mariadb`, a request chooses with `?db=mariadb` (Postgres otherwise).
   */
  mariadb?: MysqlPool | undefined;
  /**
   * Keep a report of every request in `reports` (the demo reads them back). Default true; false for a service
   * that runs for hours (the soak), where a list that grows with every request would be the leak it looks for.
   */
  keepReports?: boolean | undefined;
  logger: Logger;
  /** The budget of a request that brings none (ms). Default 10 000. */
  defaultMs?: number;
  /**
   * Without the library, for the overload benchmark's comparison: no `@deadline/fastify` plugin and the plain
   * pool (no `@deadline/pg` or `@deadline/mysql`: no server-side limit, no cancel, no KILL). Default false: the
   * library, as the demo runs it.
   */
  baseline?: boolean | undefined;
  /**
   * For the overload benchmark's CPU-bound chain: the stock query reads its row at once (no `pg_sleep`, no
   * `SLEEP`; `?workMs=` is ignored). Default false.
   */
  shortQuery?: boolean | undefined;
  /**
   * For the overload benchmark's CPU-bound chain: called first in the route's handler, with the request's `?rid=`
   * (the work a real handler does on its own event loop). Default: none.
   */
  handlerWork?: ((rid: string | undefined) => void) | undefined;
  /**
   * For the overload benchmark: the deadline plugin's `admission` option (not with `baseline`).
   * Default: not set.
   */
  admission?: FastifyDeadlineOptions['admission'];
  /** For the overload benchmark: plugins registered before everything else (`@fastify/under-pressure`). */
  register?: ((app: FastifyInstance) => PromiseLike<unknown>) | undefined;
}

export interface Inventory {
  url: string;
  /** One entry per stock request, in arrival order. */
  reports: InventoryReport[];
  close(): Promise<void>;
}

/** Starts inventory on an ephemeral loopback port. */
export async function startInventory(options: InventoryOptions): Promise<Inventory> {
  if (options.pool === undefined && options.mariadb === undefined) {
    throw new TypeError('inventory needs a database: `pool` (Postgres) or `mariadb`');
  }
  const postgres = options.pool === undefined ? undefined : stockQuery({ ...options, mariadb: undefined });
  const mariadb = options.mariadb === undefined ? undefined : stockQuery(options);
  const reports: InventoryReport[] = [];
  const app = Fastify({ loggerInstance: options.logger.child({ service: 'inventory' }), forceCloseConnections: true });
  if (options.register !== undefined) await options.register(app as unknown as FastifyInstance);
  // `baseline`: no deadline plugin (no budget read, nothing stopped).
  if (options.baseline !== true) {
    await app.register(fastifyDeadline, {
      serviceName: 'inventory',
      defaultMs: options.defaultMs ?? 10_000,
      maxMs: 60_000,
      admission: options.admission,
    });
  }

  app.get('/stock/:sku', async (request, reply) => {
    const { sku } = request.params as { sku: string };
    const query = request.query as { workMs?: string; fail?: string; rid?: string; db?: string };
    options.handlerWork?.(query.rid);
    const workMs = Math.min(Math.max(Number(query.workMs ?? 20) || 0, 0), 30_000);
    const started = performance.now();
    const report: InventoryReport = {
      traceId: currentContext()?.trace?.traceId,
      rid: query.rid,
      budgetMs: request.deadline?.budget.budgetMs,
      budgetSource: request.deadline?.budget.header ?? request.deadline?.budget.source,
      outcome: 'finished',
      workedMs: 0,
      endedAt: 0,
    };
    if (options.keepReports !== false) reports.push(report);
    if (query.fail === '1') {
      report.outcome = 'failed';
      report.endedAt = performance.now();
      return reply.code(503).send({ error: 'inventory is failing (asked to)' });
    }
    try {
      const stock = ((query.db === 'mariadb' ? mariadb : postgres) ?? mariadb ?? postgres) as StockQuery;
      return await stock(sku, workMs);
    } catch (error) {
      report.outcome = isDeadlineError(error) ? 'stopped' : 'failed';
      throw error;
    } finally {
      report.endedAt = performance.now();
      report.workedMs = report.endedAt - started;
    }
  });

  const url = await app.listen({ port: options.port ?? 0, host: options.host ?? '127.0.0.1' });
  return { url, reports, close: () => app.close() };
}

/** A stock lookup on the database the options name: `{ sku, available }` after `workMs` of the database's time. */
type StockQuery = (sku: string, workMs: number) => Promise<unknown>;

function stockQuery(options: InventoryOptions): StockQuery {
  const baseline = options.baseline === true;
  if (options.mariadb !== undefined) {
    // `baseline`: the plain pool, never killed.
    const db = baseline ? options.mariadb : withMysql(options.mariadb, { name: 'inventory-db' });
    if (options.shortQuery === true) {
      return async (sku) => {
        const [rows] = await db.query<RowDataPacket[]>('SELECT ? AS sku, 7 AS available', [sku]);
        return rows[0];
      };
    }
    return async (sku, workMs) => {
      // SLEEP stands for a slow query, and shows in the processlist.
      const [rows] = await db.query<RowDataPacket[]>(
        'SELECT ? AS sku, 7 AS available FROM (SELECT SLEEP(? / 1000)) AS work',
        [sku, workMs],
      );
      return rows[0];
    };
  }
  const pool = options.pool;
  if (pool === undefined) throw new TypeError('inventory needs a database: `pool` (Postgres) or `mariadb`');
  // `baseline`: plain pool queries, never cancelled.
  const db: { query(text: string, values: unknown[]): Promise<{ rows: unknown[] }> } = baseline
    ? pool
    : withDeadline(pool, { name: 'inventory-db' });
  if (options.shortQuery === true) {
    return async (sku) => (await db.query('SELECT $1::text AS sku, 7 AS available', [sku])).rows[0];
  }
  return async (sku, workMs) => {
    // The work is on the database: pg_sleep stands for a slow query, and shows in pg_stat_activity.
    const { rows } = await db.query('SELECT $1::text AS sku, 7 AS available FROM pg_sleep($2::float8 / 1000)', [
      sku,
      workMs,
    ]);
    return rows[0];
  };
}
