/**
 * The overload benchmark's clients: each request carries a 1 s budget (`X-Request-Deadline`) and is abandoned
 * when it runs out, as a real client would. Open loop — arrivals at a fixed rate whatever the answers do, bounded
 * in count and time — for the load levels; closed loop — a fixed number of clients, each sending again when
 * answered — for the chain's capacity.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';

/** What became of one request, as its client saw it. */
export type Outcome = 'pending' | 'ok' | 'shed' | 'gave-up' | 'error';

export interface RequestRecord {
  /** Request id: the order id asked for, which the chain's statements are tagged with. */
  rid: number;
  /** When the open loop meant to send it (its arrival time; = sentAt in a closed loop). */
  scheduledAt: number;
  sentAt: number;
  /** When the client stops waiting: `sentAt + budget`. */
  giveUpAt: number;
  /** When the answer was in, body and all (any status); undefined if none came in time. */
  doneAt: number | undefined;
  status: number | undefined;
  /** ok: a 2xx in time. shed: another status in time (504, 503…). gave-up: nothing in time. error: a network error. */
  outcome: Outcome;
}

/** The record of a request just sent, at `sentAt`, whose client gives up `budgetMs` later. */
export function pendingRecord(rid: number, scheduledAt: number, sentAt: number, budgetMs: number): RequestRecord {
  return {
    rid,
    scheduledAt,
    sentAt,
    giveUpAt: sentAt + budgetMs,
    doneAt: undefined,
    status: undefined,
    outcome: 'pending',
  };
}

/** Until when the client cared: its answer if one came, else its give-up. */
export const interestEnd = (r: RequestRecord) => r.doneAt ?? r.giveUpAt;

/** Time from sending to an answer or to giving up (a request that gave up counts as the whole budget). */
export const latency = (r: RequestRecord) => (r.doneAt ?? r.giveUpAt) - r.sentAt;

export class BudgetedClient {
  readonly #agent = new Agent({ connections: null, pipelining: 1, keepAliveTimeout: 10_000 });
  /** The gateway; changes when the chain is restarted. */
  url: string;
  readonly #query: string;
  /** Every request's budget, or the longest of them when `budgetOf` gives each its own. */
  readonly budgetMs: number;
  /** Each request's own budget by its rid (at most `budgetMs`); unset: `budgetMs` for all. May be changed between runs. */
  budgetOf: ((rid: number) => number) | undefined;
  /** Every request sent, in order. */
  readonly records: RequestRecord[] = [];
  #pending = 0;
  #nextRid: () => number;

  /** `budgetOf`: each request's own budget, by its rid (a mix of budgets); at most `budgetMs`. */
  constructor(options: {
    url: string;
    workMs: number;
    budgetMs: number;
    nextRid: () => number;
    budgetOf?: ((rid: number) => number) | undefined;
  }) {
    this.url = options.url;
    this.#query = `workMs=${options.workMs}`;
    this.budgetMs = options.budgetMs;
    this.#nextRid = options.nextRid;
    this.budgetOf = options.budgetOf;
  }

  /** Requests not settled yet. */
  get pending(): number {
    return this.#pending;
  }

  /** Sends one request; resolves when it settled (never rejects). */
  async send(scheduledAt = performance.now()): Promise<RequestRecord> {
    const rid = this.#nextRid();
    const budgetMs = this.budgetOf === undefined ? this.budgetMs : Math.min(this.budgetMs, this.budgetOf(rid));
    const record = pendingRecord(rid, scheduledAt, performance.now(), budgetMs);
    this.records.push(record);
    this.#pending++;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), budgetMs);
    try {
      const response = await request(`${this.url}/orders/${rid}?${this.#query}&rid=${rid}`, {
        dispatcher: this.#agent,
        headers: { 'x-request-deadline': String(budgetMs) },
        signal: abort.signal,
      });
      await response.body.text();
      record.doneAt = performance.now();
      record.status = response.statusCode;
      record.outcome = response.statusCode >= 200 && response.statusCode < 300 ? 'ok' : 'shed';
    } catch {
      record.outcome = abort.signal.aborted ? 'gave-up' : 'error';
      if (record.outcome === 'error') record.doneAt = performance.now();
    } finally {
      clearTimeout(timer);
      this.#pending--;
    }
    return record;
  }

  /** Waits until every request sent has settled (at most one budget and a little). */
  async settle(): Promise<void> {
    const until = performance.now() + this.budgetMs + 5_000;
    while (this.#pending > 0 && performance.now() < until) await sleep(20);
  }

  close(): Promise<void> {
    return this.#agent.destroy();
  }
}

/** An open-loop run: its window on the runner's clock, and how well the sender kept to its schedule. */
export interface PacedRun {
  start: number;
  /** The scheduled end: start + count ÷ rate. */
  end: number;
  count: number;
}

/**
 * Fires `fire` at `rate` per second for at most `seconds` (so at most rate × seconds times), or until `stop()`
 * says so (asked every few ms). Late ticks fire at once, in a burst: arrivals do not wait for answers.
 */
export async function paced(
  rate: number,
  seconds: number,
  fire: (scheduledAt: number) => void,
  stop?: () => boolean,
): Promise<PacedRun> {
  const interval = 1000 / rate;
  const total = Math.max(1, Math.round(rate * seconds));
  const start = performance.now();
  let count = 0;
  while (count < total) {
    const now = performance.now();
    while (count < total && start + count * interval <= now) {
      fire(start + count * interval);
      count++;
    }
    if (count < total && stop?.()) break;
    if (count < total) await sleep(Math.max(0, start + count * interval - performance.now()));
  }
  return { start, end: start + count * interval, count };
}

/** What sends one request and resolves when it settled: an HTTP client here, a broker's (broker/broker-client.ts). */
export interface RequestSender {
  send(): Promise<RequestRecord>;
}

/** A closed loop of `concurrency` clients for `seconds`; resolves when all have settled. */
export async function closedLoop(client: RequestSender, concurrency: number, seconds: number): Promise<PacedRun> {
  const start = performance.now();
  const end = start + seconds * 1000;
  let count = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        count++;
        await client.send();
      }
    }),
  );
  return { start, end, count };
}

/** The q-quantile (0…1) of numbers, by nearest rank; NaN for none. */
export function quantile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}
