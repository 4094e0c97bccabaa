/**
 * The soak's clients: an open loop of requests into the demo chain, mixed as a service's callers are.
 *
 * - 60 %: an order read with a budget it fits in (`enoughMs`);
 * - 30 %: the same read with a budget too small to finish (shorter than inventory's query): the chain must stop
 *   the work, on the database too;
 * - 5 %: a client that hangs up mid-request;
 * - 5 %: a charge (`POST /charges` on orders) with an `Idempotency-Key`, first sent with a budget that often runs
 *   out and retried with the same key until it is answered (at most `chargeAttempts` times).
 *
 * Half the reads run inventory's query on PostgreSQL, half on MariaDB; a few ask orders for a detached audit
 * write (a task the drain must see end). Every request is recorded as its client saw it.
 */
import { paced } from '@deadline/bench/overload-load';
import { Agent, request } from 'undici';
import type { LoadRecord } from './recovery.js';

export type RequestKind = 'read' | 'short' | 'hang-up' | 'charge';

/** One request as its client saw it (times on the runner's `performance.now()`). */
export interface SoakRecord extends LoadRecord {
  kind: RequestKind;
  budgetMs: number;
  /** The status, if an answer came. */
  status: number | undefined;
  /** orders' breaker answered for inventory (a 503 with Retry-After). */
  circuitOpen: boolean;
  /** Where inventory ran a read's stock query; undefined for a charge (orders alone, on PostgreSQL). */
  db?: 'postgres' | 'mariadb' | undefined;
}

/** What became of one idempotency key. */
export interface ChargeKey {
  key: string;
  /** The order it charges: one per key, so the charges table says how many times each key took effect. */
  order: number;
  attempts: number;
  /** Each attempt's status, or 0 where none came (it gave up, or hung up). */
  statuses: number[];
  /** The charge id each answered attempt returned (all the same when the key did its job). */
  chargeIds: number[];
}

export interface SoakLoadOptions {
  gatewayUrl: string;
  ordersUrl: string;
  /** inventory's query time (ms). */
  workMs: number;
  /** The budget of a request that fits (ms). */
  enoughMs: number;
  /** Attempts per idempotency key. Default 4. */
  chargeAttempts?: number;
  /** Share of reads that ask for a detached audit write. Default 0.02. */
  auditShare?: number;
  /** Makes keys unique to this run. */
  runId: string;
  /** The order the first key charges (the next keys the ones after it). Default 1. */
  firstOrder?: number;
}

/**
 * The mix, in a fixed cycle of 20 rather than drawn at random: 12 reads that fit, 6 too short, 1 hang-up, 1
 * charge. Every second of load then holds the same mix, so goodput moves with what the faults do and not with the
 * luck of the draw (at 60 requests/s, a random mix alone moves a second's goodput by ±10 %).
 */
// biome-ignore format: the cycle reads best as two rows of ten
const MIX: readonly RequestKind[] = [
  'read', 'short', 'read', 'read', 'short', 'read', 'hang-up', 'read', 'short', 'read',
  'read', 'charge', 'read', 'short', 'read', 'read', 'short', 'read', 'read', 'short',
];

/**
 * The soak's load on one chain: {@link SoakLoad.run} for the open loop, {@link SoakLoad.capacity} for a closed
 * loop that measures what the chain can answer.
 *
 * @example
 * ```ts
 * const load = new SoakLoad({ gatewayUrl, ordersUrl, workMs: 30, enoughMs: 1_000, runId: 'local' });
 * await load.run(60, 30);
 * await load.settle();
 * console.log(load.records.filter((r) => r.ok).length, 'answered in time');
 * ```
 */
export class SoakLoad {
  readonly records: SoakRecord[] = [];
  readonly charges: ChargeKey[] = [];
  readonly #options: Required<SoakLoadOptions>;
  readonly #agent = new Agent({ connections: null, pipelining: 1, keepAliveTimeout: 10_000 });
  #rid = 0;
  #sent = 0;
  #pending = 0;

  constructor(options: SoakLoadOptions) {
    this.#options = { chargeAttempts: 4, auditShare: 0.02, firstOrder: 1, ...options };
  }

  /**
   * Sends at `rate` per second for `seconds`, or until `stop()` says so; resolves when the last is sent (not
   * answered: see {@link settle}).
   */
  async run(rate: number, seconds: number, stop?: () => boolean): Promise<void> {
    await paced(rate, seconds, () => this.#fire(), stop);
  }

  /** A closed loop of `concurrency` clients sending reads that fit, for `seconds`: the chain's capacity. */
  async capacity(concurrency: number, seconds: number): Promise<number> {
    const start = performance.now();
    const end = start + seconds * 1000;
    let ok = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (performance.now() < end) if ((await this.#read('read', this.#options.enoughMs)).ok) ok++;
      }),
    );
    return ok / ((performance.now() - start) / 1000);
  }

  /** Waits until every request sent has settled (each gives up on its own within its budget and a second). */
  async settle(): Promise<void> {
    while (this.#pending > 0) await new Promise((resolve) => setTimeout(resolve, 20));
  }

  close(): Promise<void> {
    return this.#agent.destroy();
  }

  #fire(): void {
    const kind = MIX[this.#sent++ % MIX.length] as RequestKind;
    const { workMs, enoughMs } = this.#options;
    if (kind === 'charge') void this.#charge();
    else if (kind === 'short') void this.#read(kind, 3 + Math.floor(Math.random() * Math.max(1, workMs - 8)));
    else void this.#read(kind, enoughMs);
  }

  async #read(kind: RequestKind, budgetMs: number): Promise<SoakRecord> {
    const rid = ++this.#rid;
    const db = rid % 2 === 0 ? 'postgres' : 'mariadb';
    const audit = Math.random() < this.#options.auditShare ? '&audit=detached' : '';
    const url = `${this.#options.gatewayUrl}/orders/${rid}?workMs=${this.#options.workMs}&db=${db}&rid=${rid}${audit}`;
    // A client that hangs up does so after a few ms: mid-chain, before its answer can come.
    const hangUpMs = kind === 'hang-up' ? 2 + Math.random() * this.#options.workMs : undefined;
    return this.#send(kind, budgetMs, url, { method: 'GET' }, hangUpMs, db);
  }

  async #send(
    kind: RequestKind,
    budgetMs: number,
    url: string,
    init: { method: 'GET' | 'POST'; body?: string; headers?: Record<string, string> },
    hangUpMs?: number,
    db?: SoakRecord['db'],
  ): Promise<SoakRecord & { body?: unknown }> {
    const sentAt = performance.now();
    const record: SoakRecord = {
      kind,
      budgetMs,
      sentAt,
      doneAt: sentAt,
      ok: false,
      enoughBudget: kind === 'read',
      status: undefined,
      circuitOpen: false,
      db,
    };
    this.records.push(record);
    this.#pending++;
    const abort = new AbortController();
    // The client's own patience: the budget it gave, and a second for the answer that says it ran out.
    const timer = setTimeout(() => abort.abort(), hangUpMs ?? budgetMs + 1_000);
    try {
      const response = await request(url, {
        dispatcher: this.#agent,
        method: init.method,
        body: init.body ?? null,
        headers: { 'x-request-deadline': String(budgetMs), ...init.headers },
        signal: abort.signal,
      });
      const text = await response.body.text();
      record.doneAt = performance.now();
      record.status = response.statusCode;
      record.circuitOpen = response.statusCode === 503 && response.headers['retry-after'] !== undefined;
      record.ok = response.statusCode >= 200 && response.statusCode < 300 && record.doneAt - sentAt <= budgetMs;
      return record.ok && init.method === 'POST' ? { ...record, body: safeJson(text) } : record;
    } catch {
      record.doneAt = performance.now();
      return record;
    } finally {
      clearTimeout(timer);
      this.#pending--;
    }
  }

  /** One key: a first attempt on a budget that often runs out, then retries with time enough, the same key. */
  async #charge(): Promise<void> {
    this.#pending++;
    try {
      const order = this.#options.firstOrder + this.charges.length;
      const entry: ChargeKey = {
        key: `soak-${this.#options.runId}-${order}`,
        order,
        attempts: 0,
        statuses: [],
        chargeIds: [],
      };
      this.charges.push(entry);
      const body = JSON.stringify({ order, amountCents: 100 });
      const headers = { 'content-type': 'application/json', 'idempotency-key': entry.key };
      for (let attempt = 1; attempt <= this.#options.chargeAttempts; attempt++) {
        entry.attempts = attempt;
        const budgetMs = attempt === 1 ? 2 + Math.floor(Math.random() * 14) : this.#options.enoughMs;
        const result = await this.#send('charge', budgetMs, `${this.#options.ordersUrl}/charges`, {
          method: 'POST',
          body,
          headers,
        });
        entry.statuses.push(result.status ?? 0);
        const charge = (result.body as { charge?: unknown } | undefined)?.charge;
        if (result.status === 201 && typeof charge === 'number') entry.chargeIds.push(charge);
        if (result.status === 201) return;
        // A retry while the first attempt still holds the key is told so (409): wait a little, as a client would.
        await new Promise((resolve) => setTimeout(resolve, 20 * attempt));
      }
    } finally {
      this.#pending--;
    }
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
