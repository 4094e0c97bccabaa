/**
 * Graceful shutdown under one budget: stop taking requests, let those in flight finish, then wait for the
 * detached work they started — all within `timeoutMs`, so a deploy neither cuts work off nor hangs.
 */

import { InvalidArgumentError } from '@deadline/core';
import { checkNumber, checkObject, monotonicNow, timerDelay } from '@deadline/core/internal';
import { type Background, type DrainReport, background as defaultBackground } from './background.js';

/** How often connections that went idle after `close()` are closed. */
const IDLE_SWEEP_MS = 50;

/**
 * A server with Node's `close(callback)`: `http.Server`, `https.Server`, what `app.listen()` returns in Express.
 *
 * @example
 * ```ts
 * const server: ClosableServer = app.listen(3000);
 * ```
 */
export interface ClosableServer {
  close(callback?: (error?: Error) => void): unknown;
  closeIdleConnections?(): void;
}

/**
 * Options of {@link closeAndDrain}.
 *
 * @example
 * ```ts
 * const options: CloseAndDrainOptions = { timeoutMs: 15_000 };
 * ```
 */
export interface CloseAndDrainOptions {
  /** The whole shutdown's budget: requests in flight, then detached work (ms). Default 10 000. */
  timeoutMs?: number | undefined;
  /** Whose tasks to wait for. Default: the process's default `background`. */
  background?: Background | undefined;
}

/**
 * What {@link closeAndDrain} saw: whether the server closed (every connection ended) in time, and the drain's
 * report.
 *
 * @example
 * ```ts
 * const report: ShutdownReport = await closeAndDrain(server);
 * process.exitCode = report.serverClosed && report.pending.length === 0 ? 0 : 1;
 * ```
 */
export interface ShutdownReport extends DrainReport {
  serverClosed: boolean;
}

/**
 * Closes `server` (no new connections; idle keep-alive ones closed), waits for the requests in flight, then
 * drains the detached work they started: all within `timeoutMs`. For Express and plain Node servers; Fastify
 * users register {@link fastifyBackground} instead, which drains in `onClose`.
 *
 * @example
 * ```ts
 * import { closeAndDrain } from '@deadline/jobs';
 * const server = app.listen(3000);
 * process.once('SIGTERM', async () => {
 *   const report = await closeAndDrain(server, { timeoutMs: 15_000 });
 *   process.exit(report.pending.length === 0 ? 0 : 1);
 * });
 * ```
 */
export async function closeAndDrain(
  server: ClosableServer,
  options: CloseAndDrainOptions = {},
): Promise<ShutdownReport> {
  if (typeof server?.close !== 'function') throw new InvalidArgumentError('server', 'a server with close()', server);
  checkObject('options', options);
  const timeoutMs = checkNumber('timeoutMs', options.timeoutMs) ?? 10_000;
  const tasks = options.background ?? defaultBackground;
  const end = monotonicNow() + timeoutMs;
  const completedBefore = tasks.completed;
  let timer: NodeJS.Timeout | undefined;
  let sweeper: NodeJS.Timeout | undefined;
  const serverClosed = await Promise.race([
    new Promise<boolean>((resolve) => {
      // An error means it was not listening: nothing more to wait for.
      server.close(() => resolve(true));
      // close() closes the keep-alive connections idle at that moment; one whose response is still being
      // written goes idle later and would hold close() until its keep-alive timeout. Sweep until closed.
      server.closeIdleConnections?.();
      sweeper = setInterval(() => server.closeIdleConnections?.(), IDLE_SWEEP_MS);
    }),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timerDelay(timeoutMs));
    }),
  ]);
  clearTimeout(timer);
  clearInterval(sweeper);
  const report = await tasks.drain({ timeoutMs: Math.max(0, end - monotonicNow()) });
  return { serverClosed, completed: tasks.completed - completedBefore, pending: report.pending };
}
