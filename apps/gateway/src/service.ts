/**
 * gateway — the edge of the demo chain (fastify + `@deadline/fastify`). It sets each request's budget from the
 * client's `X-Request-Deadline` (or the route's SLA when the client sends none), clamps it to the route's
 * maximum, and forwards to orders with plain `fetch()` through `@deadline/http`. `?mode=fixed` forwards the
 * way services do without the library: no budget sent, a fixed 5 s timeout.
 */

import fastifyDeadline, { type FastifyDeadlineOptions } from '@deadline/fastify';
import { createFetch } from '@deadline/http';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';

export interface GatewayOptions {
  /** Where to listen. Default: an ephemeral port on loopback. */
  port?: number | undefined;
  host?: string | undefined;
  ordersUrl: string;
  logger: Logger;
  /** The route's SLA: the budget of a request that brings none (ms). Default 1 000. */
  slaMs?: number;
  /**
   * Without the library, for the overload benchmark's comparison: no `@deadline/fastify` plugin, and every request
   * forwarded as in `mode=fixed` (plain fetch, a fixed 5 s timeout, no budget sent). Default false.
   */
  baseline?: boolean | undefined;
  /**
   * For the overload benchmark's CPU-bound chain: called first in the route's handler, with the request's `?rid=`
   * (the work a real handler does on its own event loop). Default: none.
   */
  handlerWork?: ((rid: string | undefined) => void) | undefined;
  /**
   * For the overload benchmark: the deadline plugin's `admission` option (not with `baseline`).
   * Default: not set.
   */
  admission?: FastifyDeadlineOptions['admission'];
  /** For the overload benchmark: plugins registered before everything else (`@fastify/under-pressure`). */
  register?: ((app: FastifyInstance) => PromiseLike<unknown>) | undefined;
}

export interface Gateway {
  url: string;
  close(): Promise<void>;
}

/** Starts the gateway on an ephemeral loopback port. */
export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const fetch = createFetch({ marginMs: 5 });
  const app = Fastify({ loggerInstance: options.logger.child({ service: 'gateway' }), forceCloseConnections: true });
  if (options.register !== undefined) await options.register(app as unknown as FastifyInstance);
  // `baseline`: no deadline plugin (no budget read, nothing sent on).
  if (options.baseline !== true) {
    await app.register(fastifyDeadline, {
      serviceName: 'gateway',
      defaultMs: options.slaMs ?? 1_000,
      maxMs: 30_000,
      admission: options.admission,
    });
  }

  app.get('/orders/:id', async (request, reply) => {
    options.handlerWork?.((request.query as { rid?: string }).rid);
    const { id } = request.params as { id: string };
    const search = request.url.includes('?') ? request.url.slice(request.url.indexOf('?')) : '';
    const fixed = options.baseline === true || search.includes('mode=fixed');
    const url = `${options.ordersUrl}/orders/${encodeURIComponent(id)}${search}`;
    const response = fixed ? await globalThis.fetch(url, { signal: AbortSignal.timeout(5_000) }) : await fetch(url);
    reply.code(response.status);
    const retryAfter = response.headers.get('retry-after');
    if (retryAfter !== null) reply.header('retry-after', retryAfter);
    return response.json();
  });

  const url = await app.listen({ port: options.port ?? 0, host: options.host ?? '127.0.0.1' });
  return { url, close: () => app.close() };
}
