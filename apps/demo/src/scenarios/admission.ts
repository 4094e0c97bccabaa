/**
 * 10. Admission. An inventory whose handler spends 10 ms of CPU per request (the event loop is its bottleneck: 100
 * requests a second at most) gets 200 requests at once, each with 300 ms to live. Without admission it takes in
 * every one and works through them in turn, most after their client gave up; with it (`admission: true`), the
 * requests that cannot finish are refused at arrival — 503, `Retry-After`, `X-Deadline-Refused-By` — and the CPU goes
 * to the ones that can.
 */
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { Agent, request } from 'undici';
import type { ScenarioTable } from '../report/table.js';
import type { AdmissionHopData } from './admission-hop.js';
import type { ScenarioContext } from './context.js';

const CPU_MS = 10;
/**
 * The hop's worker: the built file beside this one; or, where this file runs as TypeScript (the demo's test runs it
 * from src, after `npm test` built dist), the built one in dist, since a worker thread does not load TypeScript.
 */
const HOP_FILE = new URL(
  import.meta.url.endsWith('.ts') ? '../../dist/scenarios/admission-hop.js' : './admission-hop.js',
  import.meta.url,
);
const BUDGET_MS = 300;

export async function admission(ctx: ScenarioContext): Promise<ScenarioTable> {
  const count = ctx.quick ? 120 : 200;
  const rows: ScenarioTable['rows'] = [];
  for (const admitting of [false, true]) rows.push(await burst(ctx, admitting, count));
  return {
    id: 10,
    title: `A hop refuses at arrival what it cannot finish (${count} requests at once, ${CPU_MS} ms of CPU each, ${BUDGET_MS} ms budgets)`,
    columns: [
      'inventory',
      'answered in time',
      'refused at arrival (503)',
      'late or given up',
      'handlers run',
      'CPU on requests that missed (ms)',
    ],
    rows,
    note: 'With admission the loop spends its CPU on requests that can still be answered, and tells the rest at once.',
  };
}

/** One burst at a fresh inventory: what its clients got, and what its handlers spent on requests that missed. */
async function burst(ctx: ScenarioContext, admitting: boolean, count: number): Promise<(string | number)[]> {
  const data: AdmissionHopData = { postgresUrl: ctx.env.postgresUrl, admission: admitting, cpuMs: CPU_MS };
  // Node's own flags only: a test runner's (its `--conditions` resolving packages to their TypeScript) stay behind.
  const hop = new Worker(HOP_FILE, { workerData: data, execArgv: [] });
  const agent = new Agent({ connections: count });
  try {
    const [{ url }] = (await once(hop, 'message')) as [{ url: string }];
    const stock = (rid: string) => `${url}/stock/sku-1?rid=${rid}`;
    // The connections open (on a path of no route, which teaches the route nothing); then the route learns its time
    // (admission needs a few of its answers), one request at a time.
    await Promise.all(Array.from({ length: count }, () => send(agent, `${url}/connect`, 5_000)));
    for (let i = 0; i < 30; i++) await send(agent, stock(`warm-${i}`), 5_000);
    await ranOn(hop);
    const outcomes = await Promise.all(Array.from({ length: count }, (_, i) => send(agent, stock(`b${i}`), BUDGET_MS)));
    const ran = await ranOn(hop);
    let inTime = 0;
    let refused = 0;
    let wastedMs = 0;
    for (const [i, outcome] of outcomes.entries()) {
      if (outcome === 'in time') inTime++;
      else {
        if (outcome === 503) refused++;
        wastedMs += ran.get(`b${i}`) ?? 0;
      }
    }
    return [
      admitting ? 'with admission' : 'without admission',
      inTime,
      refused,
      count - inTime - refused,
      ran.size,
      Math.round(wastedMs),
    ];
  } finally {
    await agent.close();
    hop.postMessage('close');
    await once(hop, 'exit');
  }
}

/** Which requests the hop's handler ran, and for how long (ms); the hop forgets them. */
async function ranOn(hop: Worker): Promise<Map<string, number>> {
  hop.postMessage('ran');
  const [{ ran }] = (await once(hop, 'message')) as [{ ran: [string, number][] }];
  return new Map(ran);
}

/** GET `url` as a client that gives up after `budgetMs`: `'in time'`, or the status it got otherwise. */
async function send(agent: Agent, url: string, budgetMs: number): Promise<'in time' | number | 'gave up'> {
  const started = performance.now();
  try {
    const response = await request(url, {
      dispatcher: agent,
      headers: { 'x-request-deadline': String(budgetMs) },
      signal: AbortSignal.timeout(budgetMs),
    });
    await response.body.dump();
    return response.statusCode === 200 && performance.now() - started <= budgetMs ? 'in time' : response.statusCode;
  } catch {
    return 'gave up';
  }
}
