/** Waits for what inventory did for one client request (by its `rid`): the request(s) it served, once ended. */
import type { InventoryReport } from '@deadline/demo-inventory';
import { until } from '../client.js';
import type { ScenarioContext } from './context.js';

export async function inventoryFor(
  ctx: ScenarioContext,
  rid: string,
  atLeast = 1,
  limitMs = 8_000,
): Promise<InventoryReport[]> {
  const mine = () => ctx.chain.inventory.filter((report) => report.rid === rid);
  await until(() => mine().length >= atLeast && mine().every((report) => report.endedAt > 0), limitMs);
  return mine();
}
