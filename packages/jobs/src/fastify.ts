/**
 * Fastify: detached work drained when the app closes (`app.close()`, which Fastify runs after it stopped
 * taking requests and those in flight finished), and reported through the app's logger.
 */

import { checkNumber } from '@deadline/core/internal';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { type Background, background as defaultBackground } from './background.js';

/**
 * Options of {@link fastifyBackground}.
 *
 * @example
 * ```ts
 * const options: FastifyBackgroundOptions = { drainTimeoutMs: 15_000 };
 * ```
 */
export interface FastifyBackgroundOptions {
  /** How long `app.close()` waits for detached work (ms). Default 10 000. */
  drainTimeoutMs?: number | undefined;
  /** Whose tasks to drain. Default: the process's default `background`. */
  background?: Background | undefined;
}

async function plugin(app: FastifyInstance, options: FastifyBackgroundOptions): Promise<void> {
  const timeoutMs = checkNumber('drainTimeoutMs', options.drainTimeoutMs) ?? 10_000;
  const tasks = options.background ?? defaultBackground;
  // The app's logger, unless the application chose one: tasks then log like the routes that started them.
  if (!tasks.hasLogger) tasks.logger = app.log;
  app.addHook('onClose', async () => {
    await tasks.drain({ timeoutMs });
  });
}

/**
 * A Fastify plugin: `app.close()` waits (bounded) for the detached work started with `runInBackground()`, and
 * tasks log through `app.log` unless a logger was set.
 *
 * @example
 * ```ts
 * import fastifyDeadline from '@deadline/fastify';
 * import { fastifyBackground, runInBackground } from '@deadline/jobs';
 *
 * await app.register(fastifyDeadline, { serviceName: 'orders' });
 * await app.register(fastifyBackground, { drainTimeoutMs: 15_000 });
 * app.post('/orders', async (request) => {
 *   runInBackground('audit', () => audit.insert(request.body), { budgetMs: 5_000 });
 *   return { ok: true };
 * });
 * process.once('SIGTERM', () => app.close());
 * ```
 */
export const fastifyBackground = fp(plugin, { fastify: '5.x', name: '@deadline/jobs' });
