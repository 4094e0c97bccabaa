/**
 * 1. Timeouts stack. A client's budget and the middle hop's own timeout, combined: with the library the last hop
 * gets the smaller of what is left and the hop's cap, and stops with the client; with fixed per-hop timeouts
 * it gets no budget at all and works on for a client that has gone.
 */
import { ask, ms } from '../client.js';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';
import { inventoryFor } from './inventory-outcome.js';

const WORK_MS = 1_500;

export async function timeoutsStack(ctx: ScenarioContext): Promise<ScenarioTable> {
  const cases: [mode: 'library' | 'fixed', clientMs: number, ownMs: number][] = ctx.quick
    ? [
        ['library', 300, 2_000],
        ['fixed', 300, 2_000],
      ]
    : [
        ['library', 300, 2_000],
        ['library', 1_000, 500],
        ['library', 1_000, 2_000],
        ['fixed', 300, 2_000],
        ['fixed', 1_000, 500],
        ['fixed', 1_000, 2_000],
      ];
  const rows: ScenarioTable['rows'] = [];
  for (const [mode, clientMs, ownMs] of cases) {
    const path = `/orders/1?workMs=${WORK_MS}&ownTimeoutMs=${ownMs}${mode === 'fixed' ? '&mode=fixed' : ''}`;
    const answer = await ask(`${ctx.chain.gatewayUrl}${path}`, clientMs);
    const [inventory] = await inventoryFor(ctx, answer.rid);
    rows.push([
      mode === 'library' ? 'with deadline' : 'fixed timeouts',
      clientMs,
      ownMs,
      `${answer.status} in ${Math.round(answer.waitedMs)} ms`,
      inventory?.budgetSource === 'default'
        ? `none (own default ${inventory.budgetMs})`
        : (inventory?.budgetMs ?? null),
      inventory?.outcome ?? null,
      ms(Math.max(0, (inventory?.endedAt ?? answer.endedAt) - answer.endedAt)),
    ]);
  }
  return {
    id: 1,
    title: 'Timeouts stack: client budget × the middle hop’s own timeout',
    columns: [
      'mode',
      'client budget',
      'orders timeout',
      'client got',
      'inventory budget',
      'inventory',
      'dead work (ms)',
    ],
    rows,
    note: `inventory's query takes ${WORK_MS} ms. Dead work: how long inventory kept working after the client had its answer.`,
  };
}
