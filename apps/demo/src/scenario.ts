/**
 * One comparison, measured now: a client with a 300 ms budget calls an edge, which calls a downstream that
 * needs ~1 s. With propagation the downstream learns the budget and stops when the client's time is up;
 * with a fixed per-hop timeout it keeps working for a client that has long gone.
 */
import { currentSignal, prepareCall, runWithDeadline } from '@deadline/core';
import { type DownstreamReport, startDownstream } from './downstream.js';

/** One row of the demo's table. */
export interface Row {
  mode: 'propagated deadline' | 'fixed 5 s timeout';
  clientBudgetMs: number;
  clientWaitedMs: number;
  clientOutcome: string;
  downstreamBudgetMs: number | undefined;
  downstreamOutcome: DownstreamReport['outcome'];
  /** Work the downstream did after the client had given up. */
  deadWorkMs: number;
}

const CLIENT_BUDGET_MS = 300;
const MARGIN_MS = 20;

async function callWithDeadline(url: string): Promise<string> {
  return runWithDeadline(CLIENT_BUDGET_MS, async () => {
    // The budget left now, minus a margin for this hop; throws instead if nothing useful is left.
    const { headers } = prepareCall('downstream', { marginMs: MARGIN_MS });
    const res = await fetch(url, { headers, signal: currentSignal() ?? null });
    return `${res.status}`;
  });
}

async function callWithFixedTimeout(url: string): Promise<string> {
  // The client still gives up at 300 ms; the hop in between uses its own static 5 s timeout.
  const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  return `${res.status}`;
}

async function measure(mode: Row['mode'], call: (url: string) => Promise<string>): Promise<Row> {
  const downstream = await startDownstream();
  const started = performance.now();
  let clientOutcome: string;
  try {
    clientOutcome = await Promise.race([
      call(downstream.url),
      new Promise<string>((resolve) => setTimeout(resolve, CLIENT_BUDGET_MS, 'gave up (its own timeout)')),
    ]);
  } catch (error) {
    clientOutcome = (error as Error).name;
  }
  const clientWaitedMs = performance.now() - started;
  while (downstream.reports.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
  downstream.server.closeAllConnections();
  downstream.server.close();
  const report = downstream.reports[0] as DownstreamReport;
  return {
    mode,
    clientBudgetMs: CLIENT_BUDGET_MS,
    clientWaitedMs: Math.round(clientWaitedMs),
    clientOutcome,
    downstreamBudgetMs: report.budgetSeenMs,
    downstreamOutcome: report.outcome,
    deadWorkMs: Math.max(0, Math.round(report.workDoneMs - CLIENT_BUDGET_MS)),
  };
}

/** Runs both modes, one after the other, and returns the rows. */
export async function runScenario(): Promise<Row[]> {
  return [
    await measure('propagated deadline', callWithDeadline),
    await measure('fixed 5 s timeout', callWithFixedTimeout),
  ];
}
