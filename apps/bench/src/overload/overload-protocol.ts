/**
 * What the overload benchmark and its service processes (overload-chain.ts, one per hop) say to each other over
 * the IPC channel. Times are the service process's `performance.now()`; the runner maps them onto its own clock.
 */

/**
 * Which chain: the services with the library, or the same services with fixed per-hop timeouts only; or the library
 * with `@fastify/under-pressure` on its two fastify hops (gateway, inventory: orders is express, which it does not
 * serve), or with the deadline plugin's and middleware's `admission: true` on every hop.
 */
export type ChainVariant = 'library' | 'baseline' | 'library+under-pressure' | 'library+admission';

export const CHAIN_VARIANTS: readonly ChainVariant[] = [
  'library',
  'baseline',
  'library+under-pressure',
  'library+admission',
];

/** What limits the chain: inventory's pool of 5 on `pg_sleep(50 ms)`, or each hop's event loop (CPU per request). */
export type Bottleneck = 'pool' | 'cpu';

/** Where inventory's stock query runs: Postgres (`pg_sleep`), or MariaDB through mysql2 (`SLEEP`). */
export type StockDatabase = 'postgres' | 'mariadb';

export type ServiceName = 'inventory' | 'orders' | 'gateway';

/** How one service process is started (its one command-line argument, as JSON). */
export interface ServiceConfig {
  service: ServiceName;
  variant: ChainVariant;
  postgresUrl: string;
  /** Where inventory's stock query runs; orders reads Postgres either way. */
  stockDatabase: StockDatabase;
  /** MariaDB's URL (`mysql://user:password@host:port/database`), for a MariaDB stock query. */
  mariadbUrl?: string | undefined;
  /** Connections of this service's pool (inventory's is the chain's bottleneck; gateway has none). */
  poolSize: number;
  /** The next hop (orders' inventory, gateway's orders). */
  upstreamUrl?: string | undefined;
  /**
   * The CPU-bound chain: the CPU each request's handler spends first (ms, cpu-work.ts), and the stock query reads its
   * row at once. Absent: the pool-bound chain (no work in the handler, `pg_sleep`).
   */
  cpuMs?: number | undefined;
}

/** What a statement was: a request's own (inventory's stock query, orders' read), or the library's SET/RESET. */
export const STATEMENT_KINDS = ['stock', 'order', 'set', 'reset', 'other'] as const;
export type StatementKind = (typeof STATEMENT_KINDS)[number];

/**
 * One statement as the driver saw it: `[rid, startedAt, endedAt, kind]`. `rid` is the request id the client
 * chose (the order id, which inventory sees as `sku-<rid>`), or -1 where no request could be told; `kind` an
 * index into `STATEMENT_KINDS`.
 */
export type StatementRecord = [rid: number, startedAt: number, endedAt: number, kind: number];

/**
 * One request's handler on a hop: `[rid, startedAt, endedAt, cpuMicros]` — when it began, when its CPU work (if any)
 * ended, and the process CPU time that work took (0 on the pool-bound chain, where the handler does none). A request
 * that reached a hop and has no such record there was answered before its handler ran (refused at arrival).
 */
export type HandlerRecord = [rid: number, startedAt: number, endedAt: number, cpuMicros: number];

export type ParentMessage = { type: 'clock'; seq: number } | { type: 'collect'; seq: number };

export type ChainMessage =
  | { type: 'ready'; url: string }
  | { type: 'failed'; reason: string }
  | { type: 'clock'; seq: number; now: number }
  | {
      type: 'collected';
      seq: number;
      /** Statements that ended since the last collection. */
      statements: StatementRecord[];
      /** Requests that reached this service since the last collection: `[rid, arrivedAt]`. */
      arrivals: [rid: number, arrivedAt: number][];
      /** Handlers that ran since the last collection. */
      handlers: HandlerRecord[];
      /** Requests waiting for one of this service's pooled connections right now (its queue). */
      waiting: number;
      /** CPU time of the process since it started (user + system, µs). */
      cpuMicros: number;
      /** Event-loop delay since the last collection (ms): p99 and max. */
      loopDelayP99Ms: number;
      loopDelayMaxMs: number;
      /** `performance.now()` when collected. */
      now: number;
    };
