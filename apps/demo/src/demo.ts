/**
 * The whole demo as a function: prepare the services, start the chain, run each scenario (with a progress
 * line), and hand back every table, the logs and one trace to draw. `main.ts` prints it; the smoke test checks it.
 */
import { background } from '@deadline/jobs';
import { startChain } from './chain.js';
import { ask } from './client.js';
import { prepareEnvironment } from './environment.js';
import type { ScenarioTable } from './report/table.js';
import { admission } from './scenarios/admission.js';
import { breaker } from './scenarios/breaker.js';
import { budgetTravels } from './scenarios/budget-travels.js';
import type { ScenarioContext } from './scenarios/context.js';
import { databaseStops } from './scenarios/database.js';
import { detach } from './scenarios/detach.js';
import { grpcHop } from './scenarios/grpc.js';
import { inventoryFor } from './scenarios/inventory-outcome.js';
import { redisBlocking } from './scenarios/redis.js';
import { retriedPost } from './scenarios/retried-post.js';
import { retries } from './scenarios/retries.js';
import { timeoutsStack } from './scenarios/timeouts-stack.js';
import { warmUp } from './warm-up.js';

export interface DemoResult {
  tables: ScenarioTable[];
  lines: Record<string, unknown>[];
  /** The trace drawn as a waterfall: one request through the whole chain, cut at inventory. */
  traceId: string;
  postgres: string;
}

const SCENARIOS: [string, (ctx: ScenarioContext) => Promise<ScenarioTable>][] = [
  ['Timeouts stack', timeoutsStack],
  ['The remaining budget travels', budgetTravels],
  ['Retries stay in the budget', retries],
  ['Forward the context vs detach', detach],
  ['The database stops', databaseStops],
  ['Redis blocking call', redisBlocking],
  ['The breaker', breaker],
  ['A client times out and retries a POST', retriedPost],
  ['The budget crosses gRPC', grpcHop],
  ['A hop refuses what it cannot finish', admission],
];

export async function runDemo(
  options: { quick?: boolean; progress?: (line: string) => void } = {},
): Promise<DemoResult> {
  const progress = options.progress ?? (() => {});
  progress(process.env.DATABASE_URL === undefined ? 'starting an embedded PostgreSQL…' : 'connecting to PostgreSQL…');
  const env = await prepareEnvironment();
  progress('starting the chain (gateway → orders → inventory)…');
  const chain = await startChain(env).catch(async (error: unknown) => {
    await env.close();
    throw error;
  });
  try {
    const ctx: ScenarioContext = { env, chain, quick: options.quick ?? false };
    progress('warming the chain up (every database connection, each request path)…');
    ctx.cold = await warmUp(ctx);
    const tables: ScenarioTable[] = [];
    for (const [index, [name, run]] of SCENARIOS.entries()) {
      progress(`[${index + 1}/${SCENARIOS.length}] ${name}…`);
      chain.resetBreakers();
      tables.push(await run(ctx));
    }
    progress('one more request, to draw its trace…');
    chain.resetBreakers();
    // gateway → orders (Postgres, Redis, a 100 ms burn, a detached audit) → inventory, cut at the deadline.
    const tour = await ask(`${chain.gatewayUrl}/orders/9?burnMs=100&workMs=2000&audit=detached`, 800);
    await inventoryFor(ctx, tour.rid);
    await background.drain({ timeoutMs: 5_000 });
    return { tables, lines: chain.lines, traceId: tour.traceId, postgres: env.postgres };
  } finally {
    await chain.close();
    await env.close();
  }
}
