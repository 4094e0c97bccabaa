/**
 * 4. Forward the context, or detach on purpose. Forwarded, the last hop and the audit insert die with the request;
 * detached (`runInBackground`), they finish under their own budget and keep the trace.
 */

import { AUDIT_TABLE } from '@deadline/demo-orders';
import { background } from '@deadline/jobs';
import { ask, until } from '../client.js';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';
import { inventoryFor } from './inventory-outcome.js';

export async function detach(ctx: ScenarioContext): Promise<ScenarioTable> {
  const rows: ScenarioTable['rows'] = [];
  for (const how of ['forwarded', 'detached'] as const) {
    const path =
      how === 'forwarded'
        ? '/orders/4?workMs=1000&audit=attached'
        : '/orders/4?workMs=1000&inventory=detached&audit=detached';
    const answer = await ask(`${ctx.chain.gatewayUrl}${path}`, 300);
    const [inventory] = await inventoryFor(ctx, answer.rid);
    await background.drain({ timeoutMs: 5_000 });
    const { rows: audit } = await ctx.env.pool.query(
      `SELECT count(*)::int AS n FROM ${AUDIT_TABLE} WHERE trace_id = $1`,
      [answer.traceId],
    );
    rows.push([
      how === 'forwarded' ? 'forward the request context' : 'detach (runInBackground)',
      `${answer.status} in ${Math.round(answer.waitedMs)} ms`,
      inventory?.outcome ?? null,
      (audit[0] as { n: number }).n > 0 ? 'landed' : 'cancelled',
      inventory?.traceId === answer.traceId ? 'same trace' : 'lost',
    ]);
  }
  // A job on a real queue carries the trace, not the deadline: the worker runs it under the same trace id.
  if (ctx.env.redisUrl === undefined) {
    rows.push(['enqueue a BullMQ job', null, null, null, `skipped: ${ctx.env.redisMissing}`]);
  } else {
    const answer = await ask(`${ctx.chain.gatewayUrl}/orders/4?workMs=20`, 1_000);
    const processed = await until(() => ctx.chain.jobs.some((job) => job.traceId === answer.traceId), 5_000);
    rows.push([
      'enqueue a BullMQ job',
      `${answer.status} in ${Math.round(answer.waitedMs)} ms`,
      null,
      null,
      processed ? 'same trace (worker)' : 'lost',
    ]);
  }
  return {
    id: 4,
    title: 'Forward the context vs detach',
    columns: [
      'orders does',
      'client got (300 ms)',
      'inventory (1 s of work)',
      'audit insert (500 ms)',
      'trace id downstream',
    ],
    rows,
    note: 'Detached work keeps the trace and drops the deadline; it runs under a 5 s budget of its own.',
  };
}
