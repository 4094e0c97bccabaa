/**
 * orders — the middle hop of the demo chain (express + `@deadline/express`). One order read does what a real
 * service does inside one request budget: reads Postgres, looks in a Redis cache, calls inventory (through a
 * per-origin circuit breaker, optionally with retries), enqueues a BullMQ job, and writes an audit record that
 * escapes the request on purpose. Query parameters choose how (the demo's scenarios):
 *
 * - `workMs`: how long inventory's query takes; `fail=1`: inventory answers 503.
 * - `burnMs`: time this hop spends before calling on (the budget it forwards shrinks by as much).
 * - `ownTimeoutMs`: this hop's own timeout for the inventory call — a cap within the budget with the library,
 *   the only bound in `mode=fixed` (no propagation: plain fetch with `AbortSignal.timeout`, as services do today).
 * - `retry=1`: up to 3 attempts of at most `ownTimeoutMs` each.
 * - `audit=detached|attached`: the audit insert (500 ms) escapes the request, or dies with it.
 * - `inventory=detached`: the inventory call itself escapes the request (its own 5 s budget).
 * - `rid`: passed on to inventory, so the demo can match what inventory did even where no trace travels.
 * - `db=mariadb`: passed on to inventory, which then runs its stock query on MariaDB (when it has both).
 *
 * And `POST /charges` (charges.ts): a side effect made safe to retry with an `Idempotency-Key`.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { runWithDeadline } from '@deadline/core';
import { deadlineErrors, type ExpressDeadlineOptions, deadline as expressDeadline } from '@deadline/express';
import { createFetch } from '@deadline/http';
import { enqueue, runInBackground } from '@deadline/jobs';
import { withDeadline as withPg } from '@deadline/pg';
import { withDeadline as withRedis } from '@deadline/redis';
import { type CircuitBreakerOptions, createBreakers, retry } from '@deadline/resilience';
import type { Queue } from 'bullmq';
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import type { Logger } from 'pino';
import { chargeRoutes } from './charges.js';
import { ensureTable } from './tables.js';

export { CHARGES_TABLE } from './charges.js';

export interface OrdersOptions {
  /** Where to listen. Default: an ephemeral port on loopback. */
  port?: number | undefined;
  host?: string | undefined;
  inventoryUrl: string;
  pool: pg.Pool;
  logger: Logger;
  /** Cache; without it, no caching. */
  redis?: Redis | undefined;
  /** Where `order-read` jobs go; without it, none are enqueued. */
  queue?: Queue | undefined;
  /** The breaker around inventory (one per origin). */
  breaker?: Omit<CircuitBreakerOptions, 'target'> | undefined;
  /**
   * Without the library, for the overload benchmark's comparison: no `@deadline/express` middleware, the plain
   * pool (no `@deadline/pg`), and inventory called as in `mode=fixed` (plain fetch, a fixed 4 s timeout unless
   * `ownTimeoutMs` says otherwise). Default false: the library, as the demo runs it.
   */
  baseline?: boolean | undefined;
  /**
   * For the overload benchmark's CPU-bound chain: called first in `GET /orders/:id`'s handler, with the request's
   * `?rid=` (the work a real handler does on its own event loop). Default: none.
   */
  handlerWork?: ((rid: string | undefined) => void) | undefined;
  /**
   * For the overload benchmark: the deadline middleware's `admission` option (not with
   * `baseline`). Default: not set.
   */
  admission?: ExpressDeadlineOptions['admission'];
}

export interface Orders {
  url: string;
  /** Closes every breaker (between the demo's scenarios, which trip them on purpose). */
  resetBreakers(): void;
  close(): Promise<void>;
}

/** The audit table the detached writes go to (created if missing). */
export const AUDIT_TABLE = 'deadline_demo_audit';

/** Starts orders on an ephemeral loopback port. */
export async function startOrders(options: OrdersOptions): Promise<Orders> {
  // `baseline`: plain pool queries, never cancelled.
  const db: { query(text: string, values: unknown[]): Promise<{ rows: unknown[] }> } =
    options.baseline === true ? options.pool : withPg(options.pool, { name: 'orders-db' });
  const cache = options.redis === undefined ? undefined : withRedis(options.redis, { name: 'orders-cache' });
  const breakers = createBreakers({ logger: options.logger, ...options.breaker });
  const fetch = createFetch({ circuitBreaker: breakers, marginMs: 5 });
  await ensureTable(
    options.pool,
    `CREATE TABLE IF NOT EXISTS ${AUDIT_TABLE} (trace_id text, order_id int, kind text, at timestamptz DEFAULT now())`,
  );

  const app = express();
  // `baseline`: no deadline middleware (no budget read, nothing stopped).
  if (options.baseline !== true) {
    app.use(
      expressDeadline({
        serviceName: 'orders',
        defaultMs: 10_000,
        maxMs: 60_000,
        logger: options.logger,
        admission: options.admission,
      }),
    );
  }

  if (options.baseline !== true) await chargeRoutes(app, db, options.pool);

  app.get('/orders/:id', async (req: Request, res: Response, next: NextFunction) => {
    try {
      const id = Number(req.params.id) || 1;
      const q = req.query as Record<string, string | undefined>;
      options.handlerWork?.(q.rid);
      const ownTimeoutMs = Number(q.ownTimeoutMs) || (options.baseline === true ? 4_000 : 5_000);
      if (q.burnMs) await sleep(Math.min(Number(q.burnMs) || 0, 10_000));

      const cached = await cache?.get(`order:${id}`);
      const { rows } = await db.query('SELECT $1::int AS id, now() AS read_at', [id]);

      const passOn = (name: 'rid' | 'db') => (q[name] === undefined ? '' : `&${name}=${encodeURIComponent(q[name])}`);
      const stockUrl = `${options.inventoryUrl}/stock/sku-${id}?workMs=${Number(q.workMs) || 20}${q.fail === '1' ? '&fail=1' : ''}${passOn('rid')}${passOn('db')}`;
      const traceId = req.deadline?.context.trace?.traceId;
      audit(q.audit, traceId, id);

      let stock: unknown;
      if (q.inventory === 'detached') {
        // Escapes on purpose: inventory finishes even if this request dies (its own 5 s budget).
        runInBackground('inventory-refresh', () => fetch(stockUrl).then((r) => r.arrayBuffer()), { budgetMs: 5_000 });
        stock = 'refreshing in the background';
      } else if (q.mode === 'fixed' || options.baseline === true) {
        stock = await fixedTimeoutCall(stockUrl, ownTimeoutMs, q.retry === '1');
      } else {
        const call = async (signal?: AbortSignal) => {
          const response = await fetch(stockUrl, { signal: signal ?? null });
          if (!response.ok)
            throw Object.assign(new Error(`inventory answered ${response.status}`), { statusCode: response.status });
          return response.json();
        };
        stock =
          q.retry === '1'
            ? await retry((_attempt, signal) => call(signal), {
                attempts: 3,
                perAttemptTimeoutMs: ownTimeoutMs,
                baseDelayMs: 20,
              })
            : await withOwnTimeout(ownTimeoutMs, () => call());
      }

      if (options.queue !== undefined)
        await enqueue(options.queue, 'order-read', { orderId: id }, { budgetMs: 30_000, removeOnComplete: true });
      await cache?.set(`order:${id}`, JSON.stringify(rows[0]), 'PX', 5_000);
      res.json({ order: rows[0], stock, cached: cached !== null && cached !== undefined });
    } catch (error) {
      next(error);
    }
  });
  if (options.baseline !== true) app.use(deadlineErrors());
  app.use(
    (
      error: Error & { statusCode?: number; headers?: Record<string, string> },
      _req: Request,
      res: Response,
      _next: NextFunction,
    ) => {
      if (res.headersSent) return;
      res
        .status(error.statusCode ?? 500)
        .set(error.headers ?? {})
        .json({ error: error.message });
    },
  );

  function audit(kind: string | undefined, traceId: string | undefined, id: number) {
    const insert = () =>
      db.query(`INSERT INTO ${AUDIT_TABLE} (trace_id, order_id, kind) SELECT $1, $2, $3 FROM pg_sleep(0.5)`, [
        traceId,
        id,
        kind,
      ]);
    // Detached: keeps the trace, drops the deadline; its own budget bounds it.
    if (kind === 'detached') runInBackground('audit', insert, { budgetMs: 5_000 });
    // Attached (the mistake): still inside the request, so it is cancelled with it.
    else if (kind === 'attached') insert().catch(() => {});
  }

  const server: Server = createServer(app).listen(options.port ?? 0, options.host ?? '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    resetBreakers() {
      for (const [, breaker] of breakers.entries()) breaker.reset();
    },
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}

/** This hop's own timeout as a cap inside the request's budget: nesting never extends the deadline. */
function withOwnTimeout<T>(ms: number, fn: () => Promise<T>): Promise<T> {
  return runWithDeadline(ms, fn);
}

/** How services call each other without the library: a fixed timeout per call, no budget sent, fresh per retry. */
async function fixedTimeoutCall(url: string, timeoutMs: number, retries: boolean): Promise<unknown> {
  let lastError: unknown;
  for (let attempt = 1; attempt <= (retries ? 3 : 1); attempt++) {
    try {
      // The global fetch, no dispatcher of ours: nothing propagates, nothing is cut but by this timer.
      const response = await globalThis.fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
      if (response.ok) return response.json();
      lastError = new Error(`inventory answered ${response.status}`);
    } catch (error) {
      lastError = error;
    }
  }
  throw lastError;
}
