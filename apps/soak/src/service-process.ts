/**
 * The runner's handle on one soak service process (service-main.ts): starts it, asks it for samples and for its
 * end-of-run report, collects the job ids it reports, pauses and resumes it (SIGSTOP / SIGCONT), and stops it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { FinishReport, RunnerMessage, ServiceMessage, SoakServiceConfig } from './soak-protocol.js';

type Reply<T extends ServiceMessage['type']> = Extract<ServiceMessage, { type: T }>;

export class ServiceProcess {
  readonly config: SoakServiceConfig;
  /** Where it listens (undefined for the worker). */
  readonly url: string | undefined;
  readonly #child: ChildProcess;
  #seq = 0;
  readonly #waiting = new Map<number, (message: ServiceMessage) => void>();
  #stderr = '';

  private constructor(child: ChildProcess, config: SoakServiceConfig, url: string | undefined, stderr: string) {
    this.#child = child;
    this.config = config;
    this.url = url;
    this.#stderr = stderr;
    child.stderr?.on('data', (chunk: Buffer) => {
      this.#stderr = (this.#stderr + chunk.toString()).slice(-4_000);
    });
  }

  /**
   * Starts a service and waits for it to be ready (60 s at most). `onJobs` gets the job ids it reports.
   *
   * @example
   * ```ts
   * const inventory = await ServiceProcess.start({ service: 'inventory', ...urls, poolSize: 10, queueName });
   * ```
   */
  static async start(
    config: SoakServiceConfig,
    onJobs: (added: string[], processed: string[]) => void = () => {},
  ): Promise<ServiceProcess> {
    const script = fileURLToPath(new URL('./service-main.js', import.meta.url));
    const child = spawn(process.execPath, [script, JSON.stringify(config)], {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    let stderr = '';
    const collect = (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-4_000);
    };
    child.stderr?.on('data', collect);
    let handle: ServiceProcess | undefined;
    child.on('message', (message: ServiceMessage) => {
      if (message.type === 'jobs') onJobs(message.added, message.processed);
      else if ('seq' in message && handle !== undefined) handle.#answer(message);
    });
    const first = await new Promise<ServiceMessage | { type: 'exit' }>((resolve) => {
      const timer = setTimeout(() => resolve({ type: 'failed', reason: 'not ready within 60 s' }), 60_000);
      const onMessage = (message: ServiceMessage) => {
        if (message.type !== 'ready' && message.type !== 'failed') return;
        clearTimeout(timer);
        child.off('message', onMessage);
        resolve(message);
      };
      child.on('message', onMessage);
      child.once('exit', () => {
        clearTimeout(timer);
        resolve({ type: 'exit' });
      });
    });
    child.stderr?.off('data', collect);
    if (first.type !== 'ready') {
      child.kill('SIGKILL');
      const reason = first.type === 'failed' ? first.reason : `exited: ${stderr.trim().split('\n').at(-1) ?? ''}`;
      throw new Error(`the soak's ${config.service} did not start: ${reason}`);
    }
    handle = new ServiceProcess(child, config, first.url, stderr);
    return handle;
  }

  /** The last lines it wrote to stderr (for a failure's message). */
  get stderr(): string {
    return this.#stderr;
  }

  #answer(message: ServiceMessage): void {
    if (!('seq' in message)) return;
    const resolve = this.#waiting.get(message.seq);
    this.#waiting.delete(message.seq);
    resolve?.(message);
  }

  #ask<T extends ServiceMessage['type']>(type: RunnerMessage['type'], timeoutMs = 30_000): Promise<Reply<T>> {
    return new Promise((resolve, reject) => {
      if (!this.#child.connected) {
        reject(new Error(`the soak's ${this.config.service} is gone: ${this.#stderr.trim().split('\n').at(-1)}`));
        return;
      }
      const seq = ++this.#seq;
      const timer = setTimeout(() => {
        this.#waiting.delete(seq);
        reject(new Error(`the soak's ${this.config.service} did not answer "${type}" within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      this.#waiting.set(seq, (message) => {
        clearTimeout(timer);
        resolve(message as Reply<T>);
      });
      this.#child.send({ type, seq } satisfies RunnerMessage);
    });
  }

  /** Its memory and resources now (after a full collection), its abort listeners, and what went unhandled. */
  sample(): Promise<Reply<'sample'>> {
    return this.#ask<'sample'>('sample');
  }

  /** The thread ids of its MariaDB pool's connections. */
  async mysqlThreads(): Promise<number[]> {
    return (await this.#ask<'mysql-threads'>('mysql-threads')).ids;
  }

  /** Its end-of-run report: detached tasks drained, pools back to idle and their settings. */
  async finish(): Promise<FinishReport> {
    return (await this.#ask<'finished'>('finish', 60_000)).report;
  }

  /** SIGSTOP: the process stops running, its sockets stay open (a hop hung in a GC pause, a VM frozen). */
  pause(): void {
    this.#child.kill('SIGSTOP');
  }

  resume(): void {
    this.#child.kill('SIGCONT');
  }

  async close(): Promise<void> {
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return;
    const exited = once(this.#child, 'exit');
    this.#child.kill('SIGCONT');
    this.#child.kill('SIGKILL');
    await exited;
  }
}
