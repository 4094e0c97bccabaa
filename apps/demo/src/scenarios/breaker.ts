/**
 * 7. The breaker. Inventory fails; orders' breaker for it opens after 5 failures of at least 5 calls, then
 * answers at once (503, Retry-After) without calling; after its cooldown it lets probes through, and closes
 * once inventory answers again.
 */
import { ask } from '../client.js';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';

export async function breaker(ctx: ScenarioContext): Promise<ScenarioTable> {
  const rows: ScenarioTable['rows'] = [];
  const hits = () => ctx.chain.inventory.length;
  const transitions = () =>
    ctx.chain.lines.filter((line) => typeof line.to === 'string' && typeof line.from === 'string');
  const phase = async (label: string, count: number, fail: boolean) => {
    const before = hits();
    const seen = transitions().length;
    const statuses: (number | string)[] = [];
    let slowest = 0;
    for (let i = 0; i < count; i++) {
      const answer = await ask(`${ctx.chain.gatewayUrl}/orders/7${fail ? '?fail=1' : ''}`, 1_000);
      statuses.push(answer.status);
      slowest = Math.max(slowest, answer.waitedMs);
    }
    const moved = transitions()
      .slice(seen)
      .map((line) => `${String(line.from)} → ${String(line.to)}`);
    rows.push([label, summarize(statuses), hits() - before, Math.round(slowest), moved.join(', ') || '—']);
  };
  await phase('inventory failing', 6, true);
  await phase('circuit open', 5, true);
  // Wait out the cooldown (1 s in the demo; 10 s by default).
  await new Promise((resolve) => setTimeout(resolve, 1_100));
  await phase('inventory back, after the cooldown', 4, false);
  return {
    id: 7,
    title: 'The breaker opens under a failing downstream, and recovers',
    columns: ['phase', 'client got', 'calls reaching inventory', 'slowest answer (ms)', 'breaker'],
    rows,
    note: 'Open: orders answers 503 with Retry-After at once, and inventory is left alone to recover.',
  };
}

function summarize(statuses: (number | string)[]): string {
  const counts = new Map<number | string, number>();
  for (const status of statuses) counts.set(status, (counts.get(status) ?? 0) + 1);
  return [...counts].map(([status, n]) => `${n}× ${status}`).join(', ');
}
