/**
 * A downstream service built on the core alone: it re-anchors the budget it is sent on its own clock, does
 * ~1 s of work in small steps, and stops as soon as its context says nobody is waiting any more.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CancelledError, createContext, parseBudget, throwIfExpired } from '@deadline/core';

/** What the downstream observed for one request. */
export interface DownstreamReport {
  budgetSeenMs: number | undefined;
  workDoneMs: number;
  outcome: 'finished' | 'stopped';
}

const WORK_MS = 1_000;
const STEP_MS = 10;

export async function startDownstream(): Promise<{ url: string; reports: DownstreamReport[]; server: Server }> {
  const reports: DownstreamReport[] = [];
  const server = createServer((req, res) => {
    const { budgetMs } = parseBudget(req.headers);
    const ctx = createContext({ deadline: budgetMs, hop: 'downstream', root: true });
    // The caller hung up (its own deadline fired): cancel, so the work below stops.
    res.once('close', () => {
      if (!res.writableFinished) ctx.cancel(new CancelledError('caller went away', { reason: 'client-disconnected' }));
      ctx.end();
    });
    ctx.run(async () => {
      const started = performance.now();
      try {
        while (performance.now() - started < WORK_MS) {
          throwIfExpired(); // a cancellation point between steps
          await new Promise((resolve) => setTimeout(resolve, STEP_MS));
        }
        reports.push({ budgetSeenMs: budgetMs, workDoneMs: performance.now() - started, outcome: 'finished' });
        res.end('done');
      } catch {
        reports.push({ budgetSeenMs: budgetMs, workDoneMs: performance.now() - started, outcome: 'stopped' });
        if (!res.headersSent) res.writeHead(504).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/work`, reports, server };
}
