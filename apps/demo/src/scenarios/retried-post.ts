/**
 * 8. A client times out and retries a POST. Orders charges the card, then stalls once (a transient hiccup); the
 * client, with 300 ms, gets a 504 and retries with 2 s. Without a key the retry charges again: twice. With an
 * `Idempotency-Key` the retry takes the key over, skips the recorded charge and answers with it: once. A third
 * send of the keyed request is a replay of that answer.
 */
import { randomInt, randomUUID } from 'node:crypto';
import { CHARGES_TABLE } from '@deadline/demo-orders';
import { request } from 'undici';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';

interface Sent {
  status: number | 'gave up';
  waitedMs: number;
  charge: number | undefined;
  replayed: boolean;
}

async function charge(url: string, order: number, budgetMs: number, key: string | undefined): Promise<Sent> {
  const started = performance.now();
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'x-request-deadline': String(budgetMs),
  };
  if (key !== undefined) headers['idempotency-key'] = key;
  try {
    const response = await request(`${url}/charges?stallOnceMs=800`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ order, amountCents: 4_200 }),
      signal: AbortSignal.timeout(budgetMs + 250),
    });
    const body = (await response.body.json().catch(() => ({}))) as { charge?: number };
    return {
      status: response.statusCode,
      waitedMs: performance.now() - started,
      charge: body.charge,
      replayed: response.headers['idempotent-replayed'] === 'true',
    };
  } catch {
    return { status: 'gave up', waitedMs: performance.now() - started, charge: undefined, replayed: false };
  }
}

export async function retriedPost(ctx: ScenarioContext): Promise<ScenarioTable> {
  const rows: ScenarioTable['rows'] = [];
  const url = ctx.chain.ordersUrl;
  for (const mode of ['no key', 'Idempotency-Key'] as const) {
    // An order no earlier run used: the charges table outlives the demo on a shared database.
    const order = randomInt(1, 2 ** 31 - 1);
    const key = mode === 'no key' ? undefined : randomUUID();
    const first = await charge(url, order, 300, key);
    const retry = await charge(url, order, 2_000, key);
    // Sent a third time, the keyed request is replayed; without a key it would only charge a third time.
    const again = key === undefined ? undefined : await charge(url, order, 2_000, key);
    const { rows: charged } = await ctx.env.pool.query(
      `SELECT count(*)::int AS n FROM ${CHARGES_TABLE} WHERE order_id = $1`,
      [order],
    );
    rows.push([
      mode,
      `${first.status} in ${Math.round(first.waitedMs)} ms`,
      `${retry.status}, charge #${retry.charge ?? '?'}`,
      again === undefined
        ? null
        : `${again.status}${again.replayed ? ' (replayed)' : ''}, charge #${again.charge ?? '?'}`,
      (charged[0] as { n: number }).n,
    ]);
  }
  return {
    id: 8,
    title: 'A client times out and retries a POST',
    columns: ['request', 'first try (300 ms)', 'retry (2 s)', 'third send', 'card charged'],
    rows,
    note: 'orders charges, then stalls 800 ms once; the client gives up at 300 ms and sends the same POST again.',
  };
}
