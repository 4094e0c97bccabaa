/**
 * Before the tables, the chain is brought to where a running service already is: every database connection
 * open, and each path the tables' requests take run a few times — V8 compiles a function on its first calls and
 * optimises it after more, and a chain opens its keep-alive sockets, database sessions (with their password
 * exchange) and Redis connections once. Cold, the first table's first row measured that start-up instead of the
 * library: its 504 came 30–70 ms after the 300 ms budget, where every later row was within a few ms.
 *
 * The cold start is not hidden: the very first request, the first row's own, is kept and shown in that table.
 */
import type pg from 'pg';
import { type Answer, ask } from './client.js';
import type { ScenarioContext } from './scenarios/context.js';
import { inventoryFor } from './scenarios/inventory-outcome.js';

/** Rounds of every path below, all paths at once in each (so each HTTP agent opens several sockets). */
const ROUNDS = 5;

/**
 * The tables' request paths, short (ids of their own, so no table's cache entry is touched): cut by the client's
 * budget, cut by orders' own timeout, with and without the library, and answered.
 */
const PATHS: [path: string, budgetMs: number][] = [
  // Enough budget for orders to call inventory even on a busy machine (with less it rightly would not call).
  ['/orders/101?workMs=1000&ownTimeoutMs=2000', 150],
  ['/orders/102?workMs=1000&ownTimeoutMs=40', 1_000],
  ['/orders/103?workMs=100&ownTimeoutMs=2000&mode=fixed', 60],
  ['/orders/104?workMs=100&ownTimeoutMs=40&mode=fixed', 1_000],
  ['/orders/105?workMs=5', 1_000],
  ['/orders/106?workMs=5&mode=fixed', 1_000],
];

/** Inventory has each request within this (if orders did not call it, as it may not on a starved machine). */
const INVENTORY_WITHIN_MS = 2_000;

/** The first table's first row, asked cold: what the chain's first request got, before any warm-up. */
const COLD_REQUEST: [path: string, budgetMs: number] = ['/orders/100?workMs=1500&ownTimeoutMs=2000', 300];

/** Warms the chain up; resolves with the cold request's answer (asked first). */
export async function warmUp(ctx: ScenarioContext): Promise<Answer> {
  const [coldPath, coldBudget] = COLD_REQUEST;
  const cold = await ask(`${ctx.chain.gatewayUrl}${coldPath}`, coldBudget);
  await inventoryFor(ctx, cold.rid);
  await Promise.all([openEveryConnection(ctx.env.pool), openEveryConnection(ctx.env.monitor)]);
  for (let round = 0; round < ROUNDS; round++) {
    await Promise.all(
      PATHS.map(async ([path, budgetMs]) => {
        const answer = await ask(`${ctx.chain.gatewayUrl}${path}`, budgetMs);
        // Each request's work ends before the next round (and before the tables): no dead work spills over.
        await inventoryFor(ctx, answer.rid, 1, INVENTORY_WITHIN_MS);
      }),
    );
  }
  return cold;
}

/** Opens the pool's every connection at once (each a session and a password exchange), then lets them idle. */
async function openEveryConnection(pool: pg.Pool): Promise<void> {
  const clients = await Promise.all(Array.from({ length: pool.options.max ?? 10 }, () => pool.connect()));
  for (const client of clients) client.release();
}
