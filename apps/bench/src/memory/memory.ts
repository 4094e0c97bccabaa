/**
 * Memory under sustained load: a fastify app with @deadline/fastify whose route makes one outgoing fetch
 * (createFetch) to a loopback downstream, inside a context that follows a long-lived AbortSignal. It runs in its
 * own process started with `--expose-gc` (memory-process.ts), so this one stays clean; the load comes from here
 * over keep-alive HTTP (an undici Pool), so every request goes through the socket, the parser and fastify's
 * hooks as in production. Heap and RSS are read after forced GCs once warm and at the end: what grows between
 * the two is what a million requests leave behind. The long-lived signal's `abort` listeners are counted before
 * and after: each request's context adds one while it runs and must take it back.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { canPin } from '../overhead/overhead.js';
import { readyUrl } from '../shared/ready-url.js';
import type { MemoryChildMessage, MemoryParentMessage, MemorySnapshot } from './memory-protocol.js';

export interface MemoryOptions {
  /** Requests driven through the app in all, warm-up included (the figure: 1,000,000). */
  requests: number;
  /** Requests before the first measurement: JIT, pools and caches settle. Default min(10,000, requests / 2). */
  warmup?: number;
  /** Requests in flight at once (one keep-alive connection each). Default 16. */
  concurrency?: number;
  /**
   * Stop driving after this many seconds (from the start, warm-up included) even if fewer than `requests` were
   * made; the report then says how many were. Default: none — all `requests`, however long they take.
   */
  maxSeconds?: number;
  /** The node that runs the measured app. Default: this one (`process.execPath`). */
  execPath?: string;
}

export interface MemoryReport {
  /** The Node version of the measured app. */
  node: string;
  /** Requests driven in all, warm-up included (fewer than asked if `maxSeconds` cut the run short). */
  requests: number;
  /** Requests asked for. */
  requested: number;
  /** Of which before the warm measurement. */
  warmupRequests: number;
  /** Heap used after GC at the end − once warm, MB. */
  heapGrowthMB: number;
  /** RSS after GC at the end − once warm, MB (moves with the allocator, not only with leaks). */
  rssGrowthMB: number;
  /** Heap used after GC once warm, and at the end, MB. */
  heapMB: [number, number];
  /** RSS after GC once warm, and at the end, MB. */
  rssMB: [number, number];
  /** Memory of buffers and other C++ objects held by JS, once warm and at the end, MB. */
  externalMB: [number, number];
  /** `abort` listeners on the long-lived signal before the first request, and after the last. */
  listenersBefore: number;
  listenersAfter: number;
  /** Active handles (sockets, timers) once warm and at the end: a leak of timers or sockets shows here. */
  resources: [number, number];
  /** Wall time of the whole run, s. */
  seconds: number;
  requestsPerSecond: number;
  goal: string;
  met: boolean;
}

/** The goal. */
const GOAL_HEAP_GROWTH_MB = 5;
const GOAL = `heap growth < ${GOAL_HEAP_GROWTH_MB} MB after GC, abort listeners on the long-lived signal unchanged`;

/** The measured process gets one core to itself; the downstream and the load generator share the other. */
const APP_CPU = 0;

const mb = (bytes: number) => Math.round((bytes / 1024 / 1024) * 100) / 100;

function spawnPinned(execPath: string, args: string[], options: Parameters<typeof spawn>[2]): ChildProcess {
  const command = [execPath, ...args];
  if (canPin()) return spawn('taskset', ['-c', String(APP_CPU), ...command], options);
  return spawn(command[0] as string, command.slice(1), options);
}

async function startDownstream(): Promise<{ url: string; child: ChildProcess }> {
  const script = fileURLToPath(new URL('../shared/hello-server.js', import.meta.url));
  // Not pinned: it inherits this process's CPU (the load generator's, when main.ts pinned it).
  const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'inherit'] });
  return { url: await readyUrl(child, 'memory: the downstream exited before listening'), child };
}

/** The measured process, and a way to ask it for snapshots. */
class App {
  readonly child: ChildProcess;
  #nextId = 0;
  #waiting = new Map<number, (snapshot: MemorySnapshot) => void>();
  #ready: Promise<{ port: number; node: string }>;

  constructor(execPath: string, downstream: string) {
    const script = fileURLToPath(new URL('./memory-process.js', import.meta.url));
    this.child = spawnPinned(execPath, ['--expose-gc', script, downstream], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.#ready = new Promise((resolve, reject) => {
      this.child.on('message', (message: MemoryChildMessage) => {
        if (message.type === 'ready') resolve(message);
        else if (message.type === 'snapshot') {
          this.#waiting.get(message.id)?.(message.snapshot);
          this.#waiting.delete(message.id);
        }
      });
      this.child.once('exit', (code) => reject(new Error(`memory: the measured process exited (${code})`)));
      this.child.once('error', reject);
    });
    // Once ready, a later exit is handled by whoever waits on it.
    this.#ready.catch(() => {});
  }

  ready(): Promise<{ port: number; node: string }> {
    return this.#ready;
  }

  snapshot(): Promise<MemorySnapshot> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, resolve);
      this.child.once('exit', () => reject(new Error('memory: the measured process exited during a snapshot')));
      this.#send({ type: 'snapshot', id });
    });
  }

  async close(): Promise<void> {
    if (this.child.pid === undefined || this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = once(this.child, 'exit');
    if (this.child.connected) this.#send({ type: 'close' });
    else this.child.kill();
    // It closes its server and pool, then disconnects and exits; a process that hangs is killed.
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  }

  #send(message: MemoryParentMessage): void {
    this.child.send(message);
  }
}

/**
 * Drives `count` GET / through the pool, `concurrency` at a time, or fewer if `until` (a `performance.now()`)
 * passes first; fails on the first non-200. Resolves how many were made.
 */
async function drive(pool: Pool, count: number, concurrency: number, until: number, onDone: () => void) {
  let issued = 0;
  // The propagated case, as in the overhead rows: every request carries a budget the plugin parses.
  const headers = { 'x-request-deadline': '5000' };
  const worker = async () => {
    while (issued < count && performance.now() < until) {
      issued++;
      const { statusCode, body } = await pool.request({ path: '/', method: 'GET', headers });
      const text = await body.text();
      if (statusCode !== 200) throw new Error(`memory: the app answered ${statusCode}: ${text.slice(0, 200)}`);
      onDone();
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return issued;
}

export async function measureMemory(options: MemoryOptions, progress: (line: string) => void): Promise<MemoryReport> {
  const requests = options.requests;
  const warmup = options.warmup ?? Math.min(10_000, Math.floor(requests / 2));
  const concurrency = options.concurrency ?? 16;
  if (!(Number.isInteger(requests) && requests > 0 && warmup >= 0 && warmup < requests)) {
    throw new Error(`memory: need 0 ≤ warmup < requests, got ${warmup} and ${requests}`);
  }
  const started = performance.now();
  const until = options.maxSeconds === undefined ? Number.POSITIVE_INFINITY : started + options.maxSeconds * 1000;
  let done = 0;
  const ticker = setInterval(() => {
    const seconds = (performance.now() - started) / 1000;
    progress(
      `memory: ${done.toLocaleString('en')}/${requests.toLocaleString('en')} requests, ${Math.round(done / seconds)}/s`,
    );
  }, 1_000);
  ticker.unref();
  const downstream = await startDownstream();
  let app: App | undefined;
  let pool: Pool | undefined;
  try {
    app = new App(options.execPath ?? process.execPath, downstream.url);
    const { port, node } = await app.ready();
    pool = new Pool(`http://127.0.0.1:${port}`, { connections: concurrency, pipelining: 1 });
    const before = await app.snapshot();
    // The warm-up is never cut short: without it there is nothing to compare the end with.
    await drive(pool, warmup, concurrency, Number.POSITIVE_INFINITY, () => done++);
    const warm = await app.snapshot();
    const driven = warmup + (await drive(pool, requests - warmup, concurrency, until, () => done++));
    const end = await app.snapshot();
    const seconds = (performance.now() - started) / 1000;
    const heapGrowthMB = mb(end.heapUsed - warm.heapUsed);
    const met = heapGrowthMB < GOAL_HEAP_GROWTH_MB && end.listeners === before.listeners;
    return {
      node,
      requests: driven,
      requested: requests,
      warmupRequests: warmup,
      heapGrowthMB,
      rssGrowthMB: mb(end.rss - warm.rss),
      heapMB: [mb(warm.heapUsed), mb(end.heapUsed)],
      rssMB: [mb(warm.rss), mb(end.rss)],
      externalMB: [mb(warm.external), mb(end.external)],
      listenersBefore: before.listeners,
      listenersAfter: end.listeners,
      resources: [warm.resources, end.resources],
      seconds: Math.round(seconds * 10) / 10,
      requestsPerSecond: Math.round(driven / seconds),
      goal: GOAL,
      met,
    };
  } finally {
    clearInterval(ticker);
    await pool?.close();
    await app?.close();
    downstream.child.kill();
    if (downstream.child.exitCode === null && downstream.child.signalCode === null) {
      await once(downstream.child, 'exit');
    }
  }
}
