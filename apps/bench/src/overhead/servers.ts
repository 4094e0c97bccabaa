/**
 * Hello-world servers, bare and with each library, one per process: AsyncLocalStorage's hooks are
 * process-wide on Node 20, so a bare server must not share a process with an instrumented one.
 * Each runs in its own process through server-process.ts. A bare server registers nothing of the libraries, but
 * every process loads the same modules of ours (see loadTheLibrary).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Server } from 'node:http';
import type { FastifyInstance } from 'fastify';

const hello = { hello: 'world' };

/**
 * Every server process loads the library's modules, whichever variant it runs; the variant only decides what is
 * registered. Why: Node 20's ES module loader reads each file through a `FileHandle` (an EventEmitter), and after
 * some 30 of them V8 optimises Node's own HTTP code differently — bare fastify costs ~0.9k instructions more per
 * request (callgrind: the same with 30 empty modules, or 30 `fs.promises.readFile` calls). A bare server that loaded
 * two modules would be measured in a state no service importing its code is in, and the library's per-request cost
 * would carry a load-time effect that is not its own. (A CommonJS service that `require()`s the library loads it
 * synchronously, without file handles.) docs/benchmarks/history.md has the figures (session 24).
 */
async function loadTheLibrary(): Promise<void> {
  await import('@deadline/fastify');
  await import('@deadline/express');
  await import('@deadline/koa');
  await import('@deadline/hono');
}

const Fastify = async () => {
  await loadTheLibrary();
  return (await import('fastify')).default;
};
const express = async () => {
  await loadTheLibrary();
  return (await import('express')).default;
};

const Koa = async () => {
  await loadTheLibrary();
  return (await import('koa')).default;
};

const Hono = async () => {
  await loadTheLibrary();
  return (await import('hono')).Hono;
};

/** The hello-world fastify server, after `setUp` (a plugin, a hook) if one is given. */
async function fastifyServer(setUp?: (app: FastifyInstance) => unknown): Promise<Server> {
  const app = (await Fastify())({ logger: false });
  await setUp?.(app);
  app.get('/', async () => hello);
  await app.listen({ port: 0, host: '127.0.0.1' });
  return app.server;
}

/** The hello-world express server, after `setUp` (a middleware) if one is given. */
async function expressServer(setUp?: (app: import('express').Express) => unknown): Promise<Server> {
  const app = (await express())();
  await setUp?.(app);
  app.get('/', (_req, res) => {
    res.json(hello);
  });
  return listen(app);
}

/** The hello-world Koa server, after `setUp` (a middleware) if one is given. */
async function koaServer(setUp?: (app: import('koa')) => unknown): Promise<Server> {
  const app = new (await Koa())();
  await setUp?.(app);
  app.use((ctx) => {
    ctx.body = hello;
  });
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server));
  });
}

/** The hello-world Hono server on `@hono/node-server`, after `setUp` (a middleware) if one is given. */
async function honoServer(setUp?: (app: import('hono').Hono) => unknown): Promise<Server> {
  const app = new (await Hono())();
  await setUp?.(app);
  app.get('/', (c) => c.json(hello));
  const { serve } = await import('@hono/node-server');
  return new Promise((resolve) => {
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(server as Server));
  });
}

async function withDeadline(app: FastifyInstance): Promise<void> {
  await app.register((await import('@deadline/fastify')).fastifyDeadline, { serviceName: 'bench' });
}

/** OpenTelemetry registered, before the framework is loaded (its instrumentations patch modules as they load). */
async function withOpenTelemetry(): Promise<void> {
  (await import('./opentelemetry.js')).registerOpenTelemetry();
}

export const VARIANTS = {
  fastify: () => fastifyServer(),
  'fastify + @deadline/fastify': () => fastifyServer(withDeadline),
  'fastify + @fastify/request-context': () =>
    fastifyServer(async (app) => app.register((await import('@fastify/request-context')).fastifyRequestContext)),
  // The floor: the least any AsyncLocalStorage-based library can do — one `als.run` per request, nothing else.
  'fastify + als.run only': () =>
    fastifyServer((app) => {
      const als = new AsyncLocalStorage<object>();
      app.addHook('onRequest', (_request, _reply, next) => als.run({}, next));
    }),
  // Under every deadline adapter: the least one can do per request, by hand (deadline-minimum.ts).
  'fastify + deadline minimum': () =>
    fastifyServer(async (app) => (await import('../minimum/deadline-minimum.js')).addDeadlineMinimum(app)),
  // The same, keeping every promise of the library's (deadline-minimum-complete.ts).
  'fastify + complete deadline minimum': () =>
    fastifyServer(async (app) =>
      (await import('../minimum/deadline-minimum-complete.js')).addCompleteDeadlineMinimum(app),
    ),
  // An OpenTelemetry-instrumented service (a server span per request), without and with the library.
  'fastify + OpenTelemetry': async () => {
    await withOpenTelemetry();
    return fastifyServer();
  },
  'fastify + OpenTelemetry + @deadline/fastify': async () => {
    await withOpenTelemetry();
    return fastifyServer(withDeadline);
  },
  express: () => expressServer(),
  'express + @deadline/express': () =>
    expressServer(async (app) => app.use((await import('@deadline/express')).deadline({ serviceName: 'bench' }))),
  // The least a deadline middleware can do keeping the library's promises, by hand (express-minimum-complete.ts).
  'express + complete deadline minimum': () =>
    expressServer(async (app) =>
      app.use((await import('../minimum/express-minimum-complete.js')).completeDeadlineMinimum()),
    ),
  // The floor, as for fastify.
  'express + als.run only': () =>
    expressServer((app) => {
      const als = new AsyncLocalStorage<object>();
      app.use((_req, _res, next) => als.run({}, next));
    }),
  koa: () => koaServer(),
  'koa + @deadline/koa': () =>
    koaServer(async (app) => app.use((await import('@deadline/koa')).deadline({ serviceName: 'bench' }))),
  // The least a deadline middleware can do keeping the library's promises, by hand (koa-minimum-complete.ts).
  'koa + complete deadline minimum': () =>
    koaServer(async (app) =>
      app.use((await import('../minimum/koa-minimum-complete.js')).completeKoaDeadlineMinimum()),
    ),
  // The floor, as for fastify.
  'koa + als.run only': () =>
    koaServer((app) => {
      const als = new AsyncLocalStorage<object>();
      app.use((_ctx, next) => als.run({}, next));
    }),
  hono: () => honoServer(),
  'hono + @deadline/hono': () =>
    honoServer(async (app) => app.use((await import('@deadline/hono')).deadline({ serviceName: 'bench' }) as never)),
  // The least a deadline middleware can do keeping the library's promises, by hand (hono-minimum-complete.ts).
  'hono + complete deadline minimum': () =>
    honoServer(async (app) =>
      app.use((await import('../minimum/hono-minimum-complete.js')).completeHonoDeadlineMinimum() as never),
    ),
  // The floor, as for fastify.
  'hono + als.run only': () =>
    honoServer((app) => {
      const als = new AsyncLocalStorage<object>();
      app.use((_c, next) => als.run({}, next));
    }),
  'nest (express)': async () => (await import('./nest-servers.js')).nestServer('express'),
  'nest (express) + als.run only': async () =>
    (await import('./nest-servers.js')).nestServer('express', { floor: true }),
  'nest (express) + als.run and a pass-through interceptor': async () =>
    (await import('./nest-servers.js')).nestServer('express', { floor: true, passThrough: true }),
  'nest (express) + @deadline/nestjs': async () => {
    const nest = await import('./nest-servers.js');
    return nest.nestServer('express', { imports: await nest.deadlineModule() });
  },
  'nest (fastify)': async () => (await import('./nest-servers.js')).nestServer('fastify'),
  'nest (fastify) + als.run only': async () =>
    (await import('./nest-servers.js')).nestServer('fastify', { floor: true }),
  'nest (fastify) + als.run and a pass-through interceptor': async () =>
    (await import('./nest-servers.js')).nestServer('fastify', { floor: true, passThrough: true }),
  'nest (fastify) + @deadline/nestjs': async () => {
    const nest = await import('./nest-servers.js');
    return nest.nestServer('fastify', { imports: await nest.deadlineModule() });
  },
} as const;

export type Variant = keyof typeof VARIANTS;

/**
 * Variants counted in instructions only (`npm run bench:instructions`, or by hand: `node
 * dist/overhead/server-process.js <variant>` under callgrind, as instructions.ts does), not in the overhead run's
 * throughput: the hand-written minima, a reference point rather than a product (docs/benchmarks/history.md says what
 * each showed), and the frameworks whose cost is given in instructions alone (Koa, Hono, NestJS).
 */
export const COUNT_ONLY: ReadonlySet<Variant> = new Set<Variant>([
  'fastify + deadline minimum',
  'fastify + complete deadline minimum',
  'express + complete deadline minimum',
  'koa',
  'koa + @deadline/koa',
  'koa + als.run only',
  'koa + complete deadline minimum',
  'hono',
  'hono + @deadline/hono',
  'hono + als.run only',
  'hono + complete deadline minimum',
  'nest (express)',
  'nest (express) + als.run only',
  'nest (express) + als.run and a pass-through interceptor',
  'nest (express) + @deadline/nestjs',
  'nest (fastify)',
  'nest (fastify) + als.run only',
  'nest (fastify) + als.run and a pass-through interceptor',
  'nest (fastify) + @deadline/nestjs',
]);

/** What each variant is compared with: the same framework, bare. */
export const BASELINE: Record<Variant, Variant> = {
  fastify: 'fastify',
  'fastify + @deadline/fastify': 'fastify',
  'fastify + @fastify/request-context': 'fastify',
  'fastify + als.run only': 'fastify',
  'fastify + deadline minimum': 'fastify',
  'fastify + complete deadline minimum': 'fastify',
  'fastify + OpenTelemetry': 'fastify + OpenTelemetry',
  'fastify + OpenTelemetry + @deadline/fastify': 'fastify + OpenTelemetry',
  express: 'express',
  'express + @deadline/express': 'express',
  'express + als.run only': 'express',
  'express + complete deadline minimum': 'express',
  koa: 'koa',
  'koa + @deadline/koa': 'koa',
  'koa + als.run only': 'koa',
  'koa + complete deadline minimum': 'koa',
  hono: 'hono',
  'hono + @deadline/hono': 'hono',
  'hono + als.run only': 'hono',
  'hono + complete deadline minimum': 'hono',
  'nest (express)': 'nest (express)',
  'nest (express) + als.run only': 'nest (express)',
  'nest (express) + als.run and a pass-through interceptor': 'nest (express)',
  'nest (express) + @deadline/nestjs': 'nest (express)',
  'nest (fastify)': 'nest (fastify)',
  'nest (fastify) + als.run only': 'nest (fastify)',
  'nest (fastify) + als.run and a pass-through interceptor': 'nest (fastify)',
  'nest (fastify) + @deadline/nestjs': 'nest (fastify)',
};

function listen(app: import('express').Express): Promise<Server> {
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server));
  });
}
