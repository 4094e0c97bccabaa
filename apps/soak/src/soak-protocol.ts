/**
 * What the soak's runner and its service processes say to each other over IPC. A service is one hop of the demo
 * chain (or the BullMQ worker) in a process of its own, as it would be deployed: its memory, handles and pools
 * are its own, and a hop can be paused with SIGSTOP without pausing the others.
 */
import type { DrainReport } from '@deadline/jobs';
import type { AbortListenerCount } from './abort-listeners.js';
import type { PoolSettings } from './pool-settings.js';
import type { ProcessSample } from './process-probe.js';

export type SoakServiceName = 'gateway' | 'orders' | 'inventory' | 'worker';

/** How to start one service (passed as JSON on its command line). */
export interface SoakServiceConfig {
  service: SoakServiceName;
  postgresUrl: string;
  mysqlUrl: string;
  redisUrl: string;
  /** The next hop (gateway: orders; orders: inventory, through the fault proxy). */
  upstreamUrl?: string | undefined;
  /** The BullMQ queue orders adds to and the worker takes from. */
  queueName: string;
  /** Connections per database pool. */
  poolSize: number;
  /** Where the service's pino lines go; undefined: nowhere (/dev/null), still formatted and written. */
  logFile?: string | undefined;
}

/** The runner asks. */
export type RunnerMessage =
  | { type: 'sample'; seq: number }
  | { type: 'finish'; seq: number }
  | { type: 'mysql-threads'; seq: number };

/** A database pool of a service at the end: back to idle, and its idle connections' settings. */
export interface PoolReport {
  name: string;
  total: number;
  idle: number;
  waiting: number;
  settings: PoolSettings;
}

/** What a service reports at the end of the run. */
export interface FinishReport {
  /** Its detached tasks' drain (orders). */
  drain?: DrainReport | undefined;
  pools: PoolReport[];
}

/** A service says. */
export type ServiceMessage =
  | { type: 'ready'; url: string | undefined }
  | { type: 'failed'; reason: string }
  | {
      type: 'sample';
      seq: number;
      sample: ProcessSample;
      abort: AbortListenerCount;
      /** Unhandled rejections and uncaught exceptions so far. */
      unhandled: string[];
    }
  /** Unasked, in batches: job ids Redis acknowledged adding (orders), or the worker processed. */
  | { type: 'jobs'; added: string[]; processed: string[] }
  | { type: 'finished'; seq: number; report: FinishReport }
  | { type: 'mysql-threads'; seq: number; ids: number[] };
