/**
 * `POST /charges` — the demo's side effect: charging a card is a row in `deadline_demo_charges`, which no cancel
 * can take back once inserted. With an `Idempotency-Key` the charge is a `step()` of an idempotent request
 * (`@deadline/idempotency`, records in PostgreSQL): a retry after a timeout resumes after it instead of charging
 * again. `stallOnceMs`: the first request for an order stalls this long after its charge, as a transient hiccup
 * would (its client gives up); later ones do not.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { currentSignal } from '@deadline/core';
import { idempotency, pgStore, step } from '@deadline/idempotency';
import express, { type Express, type NextFunction, type Request, type Response } from 'express';
import type pg from 'pg';
import { ensureTable } from './tables.js';

/** Where the charges go (created if missing). */
export const CHARGES_TABLE = 'deadline_demo_charges';

type Queryable = { query(text: string, values: unknown[]): Promise<{ rows: unknown[] }> };

export async function chargeRoutes(app: Express, db: Queryable, pool: pg.Pool): Promise<void> {
  await ensureTable(
    pool,
    `CREATE TABLE IF NOT EXISTS ${CHARGES_TABLE} (id serial PRIMARY KEY, order_id int NOT NULL, amount_cents int NOT NULL)`,
  );
  const stalled = new Set<number>();
  const keys = idempotency({ store: pgStore(pool, { table: 'deadline_demo_idempotency' }) });
  app.post('/charges', express.json(), keys, async (req: Request, res: Response, next: NextFunction) => {
    try {
      const { order, amountCents } = req.body as { order: number; amountCents: number };
      const charge = await step('charge', async () => {
        const { rows } = await db.query(
          `INSERT INTO ${CHARGES_TABLE} (order_id, amount_cents) VALUES ($1, $2) RETURNING id`,
          [order, amountCents],
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
