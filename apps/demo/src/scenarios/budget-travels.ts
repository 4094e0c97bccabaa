/**
 * 2. The remaining budget travels. The middle hop spends 0, 200 or 600 ms before calling on: the last hop is
 * told what is left, not the client's original number.
 */
import { ask } from '../client.js';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';
import { inventoryFor } from './inventory-outcome.js';

export async function budgetTravels(ctx: ScenarioContext): Promise<ScenarioTable> {
  const clientMs = 1_000;
  const rows: ScenarioTable['rows'] = [];
  for (const burnMs of ctx.quick ? [0, 600] : [0, 200, 600]) {
    const answer = await ask(`${ctx.chain.gatewayUrl}/orders/2?burnMs=${burnMs}`, clientMs);
    const [inventory] = await inventoryFor(ctx, answer.rid);
    rows.push([clientMs, burnMs, inventory?.budgetMs ?? null, `${answer.status} in ${Math.round(answer.waitedMs)} ms`]);
  }
  return {
    id: 2,
    title: 'The remaining budget travels',
    columns: ['client budget', 'orders burns (ms)', 'inventory was given (ms)', 'client got'],
    rows,
    note: 'Each hop re-anchors what it is sent on its own monotonic clock; what it forwards is what is left, minus a 5 ms margin per call.',
  };
}
