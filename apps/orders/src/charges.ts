/**
 * `POST /charges` — the demo's side effect: charging a card is a row in `deadline_demo_charges`, which no cancel
 * can take back once inserted. With an `Idempotency-Key` the charge is a `step()` of an idempotent request
 * (`@deadline/idempotency`, records in PostgreSQL): a retry after a timeout resumes after it instead of charging
 * again. And the row carries the step's derived key under a unique constraint, as a payment provider takes an
 * idempotency key: an INSERT whose cancel raced its commit is reported stopped (the caller is answered 50 ms after
 * the deadline at most) yet committed, so the step has no result to record, and its retry must find the row
 * rather than add one (the soak found 32 double charges in 552 keys at 184 requests/s before this).
 * `stallOnceMs`: the first request for an order stalls this long after its charge, as a transient hiccup would
 * (its client gives up); later ones do not.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { currentSignal } from '@deadline/core';
import { IDEMPOTENCY_KEYS, idempotency, pgStore, step } from '@deadline/idempotency';
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type pg from 'pg';
import { ensureTable } from './tables.js';

/** Where the charges go (created if missing). */
export const CHARGES_TABLE = 'deadline_demo_charges';

type Queryable = { query(text: string, values: unknown[]): Promise<{ rows: unknown[] }> };

export async function chargeRoutes(app: Express, db: Queryable, pool: pg.Pool): Promise<void> {
  await ensureTable(
    pool,
    `CREATE TABLE IF NOT EXISTS ${CHARGES_TABLE} (id serial PRIMARY KEY, order_id int NOT NULL, amount_cents int NOT NULL, request_key text UNIQUE)`,
  );
  // A table made by an earlier version of the demo (a DATABASE_URL kept between runs) gets the column.
  await ensureTable(pool, `ALTER TABLE ${CHARGES_TABLE} ADD COLUMN IF NOT EXISTS request_key text UNIQUE`);
  const stalled = new Set<number>();
  const keys = idempotency({ store: pgStore(pool, { table: 'deadline_demo_idempotency' }) });
  app.post('/charges', express.json(), keys, async (req: Request, res: Response, next: NextFunction) => {
    try {
      const { order, amountCents } = req.body as { order: number; amountCents: number };
      const charge = await step('charge', async () => {
        // The same on every attempt of this key (none without one): a second attempt finds the first's row.
        const requestKey = IDEMPOTENCY_KEYS.get()?.next() ?? null;
        const { rows } = await db.query(
          `INSERT INTO ${CHARGES_TABLE} (order_id, amount_cents, request_key) VALUES ($1, $2, $3)
           ON CONFLICT (request_key) DO UPDATE SET request_key = EXCLUDED.request_key RETURNING id`,
          [order, amountCents, requestKey],
        );
        return rows[0] as { id: number };
      });
      const stallMs = Number(req.query.stallOnceMs ?? 0);
      if (stallMs > 0 && !stalled.has(order)) {
        stalled.add(order);
        await sleep(stallMs, undefined, { signal: currentSignal() });
      }
      res.status(201).json({ order, charge: charge.id });
    } catch (error) {
      next(error);
    }
  });
}
