/**
 * The fastify plugin. The key is claimed in a `preHandler` hook, after the body was parsed and validated (a
 * request the schema refuses never takes a key, as Stripe does not store validation failures), and the handler
 * then runs inside the key's context; the result is taken in `onSend` and stored as the answer goes out. Not
 * before: while `onSend` waited, the reply is not yet sent, and the deadline's 504 (or the handler's late answer)
 * could go out through it first. A retry that arrives before the write lands finds the key still held and waits
 * for it (woken at once in this process). A request cut at its deadline, or whose client went away, gives its key
 * back when its response closes.
 */
import { type Scope, storage } from '@deadline/core/internal';
import type { FastifyPluginCallback, FastifyRequest, onSendHookHandler, preHandlerHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { admit } from './admission.js';
import type { IdempotentRequest } from './idempotent-request.js';
import { type IdempotencyOptions, resolveOptions } from './options.js';
import { sentBody } from './sent-body.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** `false`: this route is not made idempotent by keys, whatever its method. */
    idempotency?: false;
  }
}

/**
 * Options of {@link fastifyIdempotency}: `tenant` receives the fastify request.
 *
 * @example
 * ```ts
 * const options: FastifyIdempotencyOptions = { store: redisStore(redis), tenant: (request) => request.user?.id };
 * ```
 */
export type FastifyIdempotencyOptions = IdempotencyOptions<FastifyRequest>;

interface Held {
  request: IdempotentRequest;
  context: Scope | undefined;
}

const plugin: FastifyPluginCallback<FastifyIdempotencyOptions> = (fastify, options, done) => {
  let resolved: ReturnType<typeof resolveOptions<FastifyRequest>>;
  try {
    resolved = resolveOptions<FastifyRequest>(options);
  } catch (error) {
    done(error as Error);
    return;
  }
  const held = new WeakMap<FastifyRequest, Held>();

  const preHandler: preHandlerHookHandler = (request, reply, next) => {
    if (!resolved.methods.has(request.method) || request.routeOptions.config?.idempotency === false) {
      next();
      return;
    }
    const facts = {
      method: request.method,
      route: request.routeOptions.url ?? (request.url.split('?')[0] as string),
      headers: request.raw.headersDistinct,
      body: request.body,
    };
    const context = storage.getStore();
    admit(resolved, request, facts, context).then((admission) => {
      if (admission.cause !== undefined) request.log.error({ err: admission.cause }, 'idempotency store unavailable');
      if (admission.kind === 'pass') {
        next();
        return;
      }
      if (admission.kind === 'answer') {
        reply.code(admission.answer.status).headers(admission.answer.headers).send(admission.answer.body);
        return;
      }
      const idempotent = admission.request;
      held.set(request, { request: idempotent, context });
      // Cut at the deadline (a 504 written by @deadline/fastify), or the client left: the key is given back.
      reply.raw.once('close', () => void idempotent.finish(undefined, true));
      idempotent.context.run(next);
    }, next);
  };

  const onSend: onSendHookHandler = (request, reply, payload, next) => {
    const entry = held.get(request);
    if (entry === undefined) {
      next();
      return;
    }
    held.delete(request);
    const { body, bodyBytes } = sentBody(payload);
    // The answer going out is the deadline's (or the client left). Known, not asked: asking could stop the context
    // here and send the deadline's 504 through this very reply (see _knownStopped).
    const stopped = entry.context?._knownStopped === true;
    const response = { status: reply.statusCode, headers: reply.getHeaders(), body, bodyBytes };
    void entry.request.finish(response, stopped);
    next();
  };

  fastify.addHook('preHandler', preHandler);
  fastify.addHook('onSend', onSend);
  done();
};

/**
 * The fastify plugin: requests on `methods` (POST and PATCH) that carry an `Idempotency-Key` run once per key;
 * retries get the stored answer with `Idempotent-Replayed: true`. Register it after `@deadline/fastify` (its lock
 * then follows each request's deadline) and a body parser's registration; routes opt out with
 * `config: { idempotency: false }`.
 *
 * @example
 * ```ts
 * import Fastify from 'fastify';
 * import fastifyDeadline from '@deadline/fastify';
 * import fastifyIdempotency, { pgStore, step } from '@deadline/idempotency';
 *
 * const app = Fastify();
 * await app.register(fastifyDeadline, { serviceName: 'orders', defaultMs: 2_000 });
 * await app.register(fastifyIdempotency, { store: pgStore(pool) });
 * app.post('/orders', async (request) => {
 *   const charge = await step('charge', () => payments.charge(request.body));
 *   return { charge: charge.id };
 * });
 * ```
 */
export const fastifyIdempotency = fp(plugin, { fastify: '5.x', name: '@deadline/idempotency' });
