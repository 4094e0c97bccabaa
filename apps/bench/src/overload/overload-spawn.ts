/**
 * The overload benchmark's handle on a chain: three service processes (overload-chain.ts), inventory first,
 * each told where its next hop listens. It maps their clocks onto ours, collects their statements, and stops
 * them. They may run on every CPU: main.ts pins the runner to one, and a child inherits that unless told.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import type {
  ChainMessage,
  ChainVariant,
  HandlerRecord,
  ParentMessage,
  ServiceConfig,
  ServiceName,
  StatementRecord,
  StockDatabase,
} from './overload-protocol.js';

/** A statement on the runner's clock, with the pool it ran on: `[rid, startedAt, endedAt, kind, pool]`. */
export type TimedStatement = [...StatementRecord, pool: 'inventory' | 'orders'];

export interface Collected {
  /** Requests waiting for one of inventory's connections. */
  waiting: number;
  /** CPU time of the chain's processes since they started (µs), all three and each. */
  cpuMicros: number;
  services: Record<ServiceName, ServiceCollected>;
  /** When, on the runner's clock. */
  at: number;
}

export interface ServiceCollected {
  waiting: number;
  cpuMicros: number;
  /** Event-loop delay since the last collection (ms). */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
  at: number;
}

/** The CPUs a process may run on (`Cpus_allowed_list` of /proc), or undefined where there is no /proc. */
export function allowedCpus(pid: number | 'self' = 'self'): string | undefined {
  try {
    return /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  } catch {
    return undefined;
  }
}

/** `taskset` is there to let a child use every CPU again. */
const canWiden = () => process.platform === 'linux' && spawnSync('taskset', ['-V']).status === 0;

class ServiceProcess {
  readonly url: string;
  readonly service: ServiceName;
  readonly #child: ChildProcess;
  /** Its `performance.now()` minus ours at the same instant. */
  #offset = 0;
  #seq = 0;
  readonly #waiting = new Map<number, (message: ChainMessage) => void>();

  private constructor(child: ChildProcess, url: string, service: ServiceName) {
    this.#child = child;
    this.url = url;
    this.service = service;
    child.on('message', (message: ChainMessage) => {
      if (message.type !== 'clock' && message.type !== 'collected') return;
      const resolve = this.#waiting.get(message.seq);
      this.#waiting.delete(message.seq);
      resolve?.(message);
    });
  }

  static async start(config: ServiceConfig): Promise<ServiceProcess> {
    const script = fileURLToPath(new URL('./overload-chain.js', import.meta.url));
    const command = [process.execPath, script, JSON.stringify(config)];
    const [file, args] = canWiden()
      ? (['taskset', ['-c', `0-${cpus().length - 1}`, ...command]] as const)
      : ([command[0] as string, command.slice(1)] as const);
    const child = spawn(file, args, { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-2_000);
    });
    const first = await new Promise<ChainMessage | { type: 'exit' }>((resolve) => {
      const timer = setTimeout(() => resolve({ type: 'failed', reason: 'did not start within 30 s' }), 30_000);
      child.once('message', (message: ChainMessage) => {
        clearTimeout(timer);
        resolve(message);
      });
      child.once('exit', () => {
        clearTimeout(timer);
        resolve({ type: 'exit' });
      });
    });
    if (first.type !== 'ready') {
      child.kill();
      const reason = first.type === 'failed' ? first.reason : `exited: ${stderr.trim().split('\n').at(-1) ?? ''}`;
      throw new Error(`${config.service} (${config.variant}) did not start: ${reason}`);
    }
    const service = new ServiceProcess(child, first.url, config.service);
    await service.#syncClock();
    return service;
  }

  #ask(message: ParentMessage): Promise<ChainMessage> {
    return new Promise((resolve, reject) => {
      if (!this.#child.connected) {
        reject(new Error('a service process is gone'));
        return;
      }
      this.#waiting.set(message.seq, resolve);
      this.#child.send(message);
    });
  }

  /** The offset from the round trip that took least time (IPC is ~0.1 ms each way). */
  async #syncClock(): Promise<void> {
    let best = Number.POSITIVE_INFINITY;
    for (let i = 0; i < 9; i++) {
      const before = performance.now();
      const reply = await this.#ask({ type: 'clock', seq: ++this.#seq });
      const after = performance.now();
      if (reply.type === 'clock' && after - before < best) {
        best = after - before;
        this.#offset = reply.now - (before + after) / 2;
      }
    }
  }

  /** The statements that ended since the last call (on our clock), and its state now. */
  async collect(
    into: TimedStatement[],
    arrivals: [number, number][],
    handlers: HandlerRecord[],
  ): Promise<ServiceCollected> {
    const reply = await this.#ask({ type: 'collect', seq: ++this.#seq });
    if (reply.type !== 'collected') throw new Error('unexpected reply');
    const pool = this.service === 'inventory' ? 'inventory' : 'orders';
    for (const [rid, started, ended, kind] of reply.statements) {
      into.push([rid, started - this.#offset, ended - this.#offset, kind, pool]);
    }
    for (const [rid, at] of reply.arrivals) arrivals.push([rid, at - this.#offset]);
    for (const [rid, started, ended, cpu] of reply.handlers) {
      handlers.push([rid, started - this.#offset, ended - this.#offset, cpu]);
    }
    return {
      waiting: reply.waiting,
      cpuMicros: reply.cpuMicros,
      loopDelayP99Ms: reply.loopDelayP99Ms,
      loopDelayMaxMs: reply.loopDelayMaxMs,
      at: reply.now - this.#offset,
    };
  }

  async close(): Promise<void> {
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return;
    const exited = once(this.#child, 'exit');
    this.#child.kill();
    await exited;
  }
}

export interface ChainOptions {
  variant: ChainVariant;
  postgresUrl: string;
  /** Where inventory's stock query runs. */
  stockDatabase: StockDatabase;
  mariadbUrl?: string | undefined;
  /** inventory's pool: the bottleneck. */
  poolSize: number;
  /** orders' pool (one short read per request). */
  ordersPoolSize: number;
  /** The CPU-bound chain: the CPU each handler spends per request (ms, cpu-work.ts). Absent: the pool-bound chain. */
  cpuMs?: number | undefined;
}

/** gateway → orders → inventory, one process each. */
export class ChainProcess {
  readonly options: ChainOptions;
  /** The gateway: where clients send. */
  readonly url: string;
  /** Every statement collected so far, on the runner's clock. */
  readonly statements: TimedStatement[] = [];
  /** When each request reached each service (`[rid, at]`, on the runner's clock). */
  readonly arrivals: Record<ServiceName, [number, number][]> = { gateway: [], orders: [], inventory: [] };
  /** Each hop's handlers that ran (`[rid, startedAt, endedAt, cpuMicros]`, on the runner's clock). */
  readonly handlers: Record<ServiceName, HandlerRecord[]> = { gateway: [], orders: [], inventory: [] };
  readonly #services: Record<ServiceName, ServiceProcess>;

  private constructor(options: ChainOptions, services: Record<ServiceName, ServiceProcess>) {
    this.options = options;
    this.#services = services;
    this.url = services.gateway.url;
  }

  static async start(options: ChainOptions): Promise<ChainProcess> {
    const base = {
      variant: options.variant,
      postgresUrl: options.postgresUrl,
      stockDatabase: options.stockDatabase,
      mariadbUrl: options.mariadbUrl,
      ...(options.cpuMs === undefined ? {} : { cpuMs: options.cpuMs }),
    };
    const started: ServiceProcess[] = [];
    try {
      const inventory = await ServiceProcess.start({ ...base, service: 'inventory', poolSize: options.poolSize });
      started.push(inventory);
      const orders = await ServiceProcess.start({
        ...base,
        service: 'orders',
        poolSize: options.ordersPoolSize,
        upstreamUrl: inventory.url,
      });
      started.push(orders);
      const gateway = await ServiceProcess.start({ ...base, service: 'gateway', poolSize: 0, upstreamUrl: orders.url });
      started.push(gateway);
      return new ChainProcess(options, { inventory, orders, gateway });
    } catch (error) {
      await Promise.all(started.map((s) => s.close()));
      throw error;
    }
  }

  /** Takes the statements that ended since the last call; the chain's queue and CPU now. */
  async collect(): Promise<Collected> {
    const [inventory, orders, gateway] = await Promise.all([
      this.#services.inventory.collect(this.statements, this.arrivals.inventory, this.handlers.inventory),
      this.#services.orders.collect(this.statements, this.arrivals.orders, this.handlers.orders),
      this.#services.gateway.collect(this.statements, this.arrivals.gateway, this.handlers.gateway),
    ]);
    return {
      waiting: inventory.waiting,
      cpuMicros: inventory.cpuMicros + orders.cpuMicros + gateway.cpuMicros,
      services: { inventory, orders, gateway },
      at: Math.max(inventory.at, orders.at, gateway.at),
    };
  }

  /** Kills the three: whatever they still had queued goes with them. */
  async close(): Promise<void> {
    await Promise.all(Object.values(this.#services).map((s) => s.close()));
  }
}
