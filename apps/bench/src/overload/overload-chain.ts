/**
 * One service of the demo chain — gateway (fastify), orders (express) or inventory (fastify, on Postgres or
 * MariaDB) — in a process of its own, for the overload benchmark: `node dist/overload/overload-chain.js
 * '<ServiceConfig as JSON>'`, with an IPC channel. Three processes, as three services would be deployed: each hop has
 * its own event loop and the chain can use both cores. It sends `ready` with its URL, then answers the runner
 * (overload-protocol.ts).
 *
 * Every statement its pool runs is timed where the driver sends it and hears back (for `pg_sleep` that is the
 * time a backend was busy on it, cancellation included) and tagged with the request it served, told by its
 * parameters: orders reads order `<rid>`, inventory's stock query is for `sku-<rid>`. The library's own
 * `SET statement_timeout` belongs to the statement that follows it on the connection, its `RESET` to the one
 * before.
 *
 * Every request's handler is recorded too, with its rid, when it began and (on the CPU-bound chain, `cpuMs` set)
 * when the fixed CPU time it spends first (cpu-work.ts) ended and what it used (`process.cpuUsage()`: user +
 * system, µs). A request that reached the hop without its handler running
 * was answered at arrival: refused (by admission, or by `@fastify/under-pressure`).
 */

import { subscribe } from 'node:diagnostics_channel';
import type { IncomingMessage } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { startGateway } from '@deadline/demo-gateway';
import { startInventory } from '@deadline/demo-inventory';
import { startOrders } from '@deadline/demo-orders';
import underPressure from '@fastify/under-pressure';
import type { FastifyInstance } from 'fastify';
import mysql from 'mysql2';
import { createPool as createMysqlPool, type Pool as MysqlPool } from 'mysql2/promise';
import pg from 'pg';
import pino from 'pino';
import { spendCpu } from './cpu-work.js';
import type {
  ChainMessage,
  HandlerRecord,
  ParentMessage,
  ServiceConfig,
  StatementRecord,
} from './overload-protocol.js';

const config = JSON.parse(process.argv[2] ?? '{}') as ServiceConfig;
const send = (message: ChainMessage) => process.send?.(message);

/** Statements that ended and are attributed, not yet collected. */
let ended: StatementRecord[] = [];

/** What one connection last did, for attributing the library's SET/RESET around a request's statement. */
interface ConnectionState {
  lastRid: number;
  /** A SET that ended before its statement started: it waits for that statement's rid. */
  pending: StatementRecord[];
}

/** The request a statement serves, and whether it is the stock query (inventory) or the order read (orders). */
function requestOf(values: unknown): { rid: number; kind: number } | undefined {
  const first = Array.isArray(values) ? values[0] : undefined;
  if (typeof first === 'number' && Number.isInteger(first)) return { rid: first, kind: 1 };
  const sku = typeof first === 'string' ? /^sku-(\d+)$/.exec(first) : null;
  return sku ? { rid: Number(sku[1]), kind: 0 } : undefined;
}

/** A pg Client that records every statement it runs (promise and callback forms alike). */
class TimedClient extends pg.Client {}
const query = pg.Client.prototype.query as (this: pg.Client, ...args: unknown[]) => unknown;
const states = new WeakMap<object, ConnectionState>();
Object.defineProperty(TimedClient.prototype, 'query', {
  value: function timedQuery(this: pg.Client, ...args: unknown[]): unknown {
    let state = states.get(this);
    if (state === undefined) states.set(this, (state = { lastRid: -1, pending: [] }));
    const [first, values] = args;
    const text = typeof first === 'string' ? first : ((first as { text?: string } | null)?.text ?? '');
    const served = requestOf(values);
    const rid = served?.rid;
    const isSet = rid === undefined && /^\s*SET\b/i.test(text);
    if (rid !== undefined) {
      state.lastRid = rid;
      for (const record of state.pending) {
        record[0] = rid;
        ended.push(record);
      }
      state.pending = [];
    } else if (isSet && state.pending.length > 0) {
      // A SET whose statement never ran (stopped in between): no request to charge it to.
      ended.push(...state.pending);
      state.pending = [];
    }
    const owner = state;
    // An index into STATEMENT_KINDS.
    const kind = served?.kind ?? (isSet ? 2 : /^\s*RESET\b/i.test(text) ? 3 : 4);
    const record: StatementRecord = [rid ?? (isSet ? -1 : state.lastRid), performance.now(), 0, kind];
    const done = () => {
      record[2] = performance.now();
      if (isSet) owner.pending.push(record);
      else ended.push(record);
    };
    const callback = args.at(-1);
    if (typeof callback === 'function') {
      args[args.length - 1] = (error: unknown, result: unknown) => {
        done();
        callback(error, result);
      };
      return query.apply(this, args);
    }
    const result = query.apply(this, args);
    if (result instanceof Promise) result.then(done, done);
    return result;
  },
});

/**
 * mysql2's connections, timed the same way (inventory's stock query on MariaDB): where the driver is handed the
 * statement and where it answers. A pooled connection's only: the library's side connections send KILLs, which
 * are not a request's work. A statement comes with a callback (a promise connection's, the library's) or as a
 * command whose `onResult` answers (the plain pool's `query()`).
 */
function timeMysqlStatements(): void {
  const prototype = mysql.Connection.prototype as unknown as Record<string, unknown>;
  for (const method of ['query', 'execute'] as const) {
    const original = prototype[method] as (this: object, ...args: unknown[]) => unknown;
    prototype[method] = function timedStatement(this: object, ...args: unknown[]): unknown {
      if (!('_pool' in this)) return original.apply(this, args);
      const [first, second] = args;
      const command = typeof first === 'object' && first !== null ? (first as Record<string, unknown>) : undefined;
      const values = command !== undefined && !Array.isArray(second) ? command.values : second;
      const served = requestOf(values);
      const record: StatementRecord = [served?.rid ?? -1, performance.now(), 0, served?.kind ?? 4];
      const done = () => {
        record[2] = performance.now();
        ended.push(record);
      };
      const last = args.length - 1;
      const callback = args[last];
      if (typeof callback === 'function') {
        args[last] = (...result: unknown[]) => {
          done();
          return callback(...result);
        };
      } else if (typeof command?.onResult === 'function') {
        const answer = command.onResult as (...result: unknown[]) => unknown;
        command.onResult = (...result: unknown[]) => {
          done();
          return answer(...result);
        };
      }
      return original.apply(this, args);
    };
  }
}

/**
 * When each request reached this service (its HTTP server emitted it): how long it waited on the way — above
 * all in the kernel's accept queue, where no budget is running yet.
 */
let arrivals: [number, number][] = [];
subscribe('http.server.request.start', (data) => {
  const rid = /[?&]rid=(\d+)/.exec((data as { request: IncomingMessage }).request.url ?? '')?.[1];
  if (rid !== undefined) arrivals.push([Number(rid), performance.now()]);
});

/** Handlers that ran, not yet collected. */
let handlers: HandlerRecord[] = [];

/** What each request's handler does first: its CPU work (none on the pool-bound chain), recorded with its rid. */
function handlerWork(cpuMs: number): (rid: string | undefined) => void {
  if (cpuMs === 0) {
    return (rid) => {
      const id = Number(rid);
      if (rid !== undefined && Number.isInteger(id)) {
        const now = performance.now();
        handlers.push([id, now, now, 0]);
      }
    };
  }
  return (rid) => {
    const startedAt = performance.now();
    const used = spendCpu(cpuMs);
    const id = Number(rid);
    if (rid !== undefined && Number.isInteger(id)) handlers.push([id, startedAt, performance.now(), used]);
  };
}

/**
 * `@fastify/under-pressure` 9.2.0 as its README's "Usage" section registers it (the only settings it gives; it says
 * nothing more for production), on the fastify hops only:
 *
 *     fastify.register(require('@fastify/under-pressure'), {
 *       maxEventLoopDelay: 1000,
 *       maxHeapUsedBytes: 100000000,
 *       maxRssBytes: 100000000,
 *       maxEventLoopUtilization:0.98
 *     })
 *
 * but for its two memory thresholds, left at 0 (not checked, the plugin's default): these processes sit at
 * 90–115 MB of RSS at rest, and with `maxRssBytes: 100000000` it refused every request, from the start (a quick
 * run: 100 % refused); memory is not what this benchmark loads. Everything else at its default: metrics sampled every
 * 1 000 ms (`sampleInterval`), the event-loop delay judged by its mean over the sample (less its 10 ms
 * resolution), utilisation cumulative since registration (`eventLoopUtilizationMode: 'cumulative'`), a refused
 * request answered 503 with `Retry-After: 10`. Registered before the deadline plugin, so its `onRequest` hook runs
 * first: a refusal runs no handler.
 */
const UNDER_PRESSURE = { maxEventLoopDelay: 1000, maxEventLoopUtilization: 0.98 };
const registerUnderPressure = (app: FastifyInstance) => app.register(underPressure, UNDER_PRESSURE);

/** Requests waiting in mysql2's own queue (it publishes no count: the length of its list of waiters). */
function mysqlWaiting(pool: MysqlPool | undefined): number {
  return (
    (pool as unknown as { pool?: { _connectionQueue?: { length: number } } } | undefined)?.pool?._connectionQueue
      ?.length ?? 0
  );
}

const cpuAtStart = process.cpuUsage();
const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();

try {
  const baseline = config.variant === 'baseline';
  const cpuBound = config.cpuMs !== undefined;
  // The variant's own options for a hop: `admission: true` (passed on untyped: see the demo apps), under-pressure
  // on the fastify hops.
  const variantOptions = {
    baseline,
    handlerWork: handlerWork(config.cpuMs ?? 0),
    ...(config.variant === 'library+admission' ? { admission: true } : {}),
  };
  const fastifyOptions = {
    ...variantOptions,
    ...(config.variant === 'library+under-pressure' ? { register: registerUnderPressure } : {}),
  };
  const Client = TimedClient as unknown as typeof pg.Client;
  const onMariadb = config.service === 'inventory' && config.stockDatabase === 'mariadb';
  // The CPU-bound chain's pools are large (they must never be what binds: under a busy loop each statement holds its
  // connection for as long as the loop takes to read the answer), and four chains share Postgres's 100 connections:
  // what a pool does not use for a second it closes (one chain runs at a time), and it opens a few at the start only.
  const pool =
    config.service === 'gateway' || onMariadb
      ? undefined
      : new pg.Pool({
          connectionString: config.postgresUrl,
          max: config.poolSize,
          Client,
          ...(cpuBound ? { idleTimeoutMillis: 1_000 } : {}),
        });
  let mariadb: MysqlPool | undefined;
  if (onMariadb) {
    timeMysqlStatements();
    mariadb = createMysqlPool({ uri: config.mariadbUrl ?? '', connectionLimit: config.poolSize });
  }
  // Open every connection now, so no request pays for one.
  const open = (): Promise<unknown> =>
    mariadb !== undefined ? mariadb.query('SELECT 1') : (pool as pg.Pool).query('SELECT 1');
  const opened = cpuBound ? Math.min(config.poolSize, 4) : config.poolSize;
  if (pool !== undefined || mariadb !== undefined) await Promise.all(Array.from({ length: opened }, open));
  // Quiet: a log line per request would cost more CPU than the service does.
  const logger = pino({ level: 'silent' });
  const upstream = config.upstreamUrl ?? '';
  let url: string;
  let forget = () => {};
  if (config.service === 'inventory') {
    const inventory = await startInventory({ pool, mariadb, logger, shortQuery: cpuBound, ...fastifyOptions });
    url = inventory.url;
    // inventory keeps one report per request for the demo; nobody reads them here.
    forget = () => {
      inventory.reports.length = 0;
    };
  } else if (config.service === 'orders') {
    url = (await startOrders({ inventoryUrl: upstream, pool: pool as pg.Pool, logger, ...variantOptions })).url;
  } else {
    url = (await startGateway({ ordersUrl: upstream, logger, ...fastifyOptions })).url;
  }
  ended = [];
  handlers = [];

  process.on('message', (message: ParentMessage) => {
    if (message.type === 'clock') send({ type: 'clock', seq: message.seq, now: performance.now() });
    else if (message.type === 'collect') {
      const cpu = process.cpuUsage(cpuAtStart);
      const statements = ended;
      ended = [];
      const arrived = arrivals;
      arrivals = [];
      const handled = handlers;
      handlers = [];
      forget();
      send({
        type: 'collected',
        seq: message.seq,
        statements,
        arrivals: arrived,
        handlers: handled,
        waiting: pool?.waitingCount ?? mysqlWaiting(mariadb),
        cpuMicros: cpu.user + cpu.system,
        loopDelayP99Ms: loopDelay.percentile(99) / 1e6,
        loopDelayMaxMs: loopDelay.max / 1e6,
        now: performance.now(),
      });
      loopDelay.reset();
    }
  });
  send({ type: 'ready', url });
} catch (error) {
  send({ type: 'failed', reason: error instanceof Error ? error.message : String(error) });
  process.exit(1);
}

// Killed by the runner, or orphaned: go at once (queued work and all — that is the point of a restart).
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => process.exit(0));
process.on('disconnect', () => process.exit(0));
// Overloaded services reject plenty; none of it may take the process down mid-measurement.
process.on('unhandledRejection', () => {});
