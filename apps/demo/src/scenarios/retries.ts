/**
 * 3. Retries stay in the budget. Inventory is slow; orders retries it, 3 attempts of at most 400 ms. With the
 * library every attempt gets what is left and the client is answered at its deadline; with fixed timeouts each
 * retry starts a fresh 400 ms, and the last one runs after the client has gone.
 */
import { ask, ms } from '../client.js';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';
import { inventoryFor } from './inventory-outcome.js';

export async function retries(ctx: ScenarioContext): Promise<ScenarioTable> {
  const clientMs = 1_000;
  const rows: ScenarioTable['rows'] = [];
  for (const mode of ['library', 'fixed'] as const) {
    const path = `/orders/3?workMs=2000&retry=1&ownTimeoutMs=400${mode === 'fixed' ? '&mode=fixed' : ''}`;
    const answer = await ask(`${ctx.chain.gatewayUrl}${path}`, clientMs);
    const attempts = await inventoryFor(ctx, answer.rid, mode === 'fixed' ? 3 : 1);
    const lastEnd = Math.max(...attempts.map((a) => a.endedAt));
    rows.push([
      mode === 'library' ? 'with deadline' : 'fixed timeouts',
      `${answer.status} in ${Math.round(answer.waitedMs)} ms`,
      attempts.length,
      attempts.map((a) => (a.budgetSource === 'default' ? 'none' : String(a.budgetMs))).join(' / '),
      ms(Math.max(0, lastEnd - answer.endedAt)),
    ]);
  }
  return {
    id: 3,
    title: 'Retries stay in the budget',
    columns: [
      'mode',
      'client got (1000 ms budget)',
      'attempts',
      'budget each attempt saw (ms)',
      'work after the client left (ms)',
    ],
    rows,
    note: 'orders: 3 attempts of at most 400 ms each; inventory needs 2 s.',
  };
}
