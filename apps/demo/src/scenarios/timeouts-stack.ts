/**
 * 1. Timeouts stack. A client's budget and the middle hop's own timeout, combined: with the library the last hop
 * gets the smaller of what is left and the hop's cap, and stops with the client; with fixed per-hop timeouts
 * it gets no budget at all and works on for a client that has gone.
 */
import { ask, ms } from '../client.js';
import { type HoldUp, measureHoldUp } from '../held-up.js';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';
import { inventoryFor } from './inventory-outcome.js';

const WORK_MS = 1_500;

/** The chain's first request, cold (the first row before the warm-up), for the note. */
function coldNote(ctx: ScenarioContext): string {
  const cold = ctx.cold;
  return cold === undefined
    ? ''
    : `; the first row's request, made cold as the chain's very first, got ${cold.status} in ${Math.round(cold.waitedMs)} ms`;
}

/** How late an answer may land after the client's budget before its row says why. */
const LATE_MS = 10;

/** Why an answer did not come at the client's budget, when it did not: for the row's cell. */
function why(waitedMs: number, clientMs: number, ownMs: number, heldUp: HoldUp): string {
  // When orders' own timeout is the smaller, the answer comes at it, well before the client's budget.
  if (ownMs < clientMs) return ' (orders’ timeout)';
  const lateMs = Math.round(waitedMs) - clientMs;
  if (lateMs <= LATE_MS) return '';
  const waited = heldUp.cpuWaitMs === undefined ? '' : `waited ${heldUp.cpuWaitMs} ms for a CPU, `;
  return ` (${lateMs} ms late; meanwhile this process ${waited}stalled ${heldUp.longestStallMs} ms at most)`;
}

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
    const { value: answer, heldUp } = await measureHoldUp(() => ask(`${ctx.chain.gatewayUrl}${path}`, clientMs));
    const [inventory] = await inventoryFor(ctx, answer.rid);
    rows.push([
      mode === 'library' ? 'with deadline' : 'fixed timeouts',
      clientMs,
      ownMs,
      `${answer.status} in ${Math.round(answer.waitedMs)} ms${why(answer.waitedMs, clientMs, ownMs, heldUp)}`,
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
    note: `inventory's query takes ${WORK_MS} ms. Dead work: how long inventory kept working after the client had its answer. Measured warm, as on a running service${coldNote(ctx)}. A row more than ${LATE_MS} ms late says how this process (every hop, and the client) was held up meanwhile: waiting for a CPU (a busy machine), or stalled (that, or a GC).`,
  };
}
