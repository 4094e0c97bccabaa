/**
 * The order of registration does not matter: routes added before the plugin — by the app, or by a plugin loaded
 * first (`@fastify/cors`'s `OPTIONS *`, a file `@fastify/autoload` reads before the plugin's) — run with their own
 * `config.deadline`, and no warning is logged. A bad `config.deadline` still fails clearly: at startup on a route
 * added after the plugin, at its first request (500, naming the route and the option) on one added before.
 */
import { createRequire } from 'node:module';
import fastifyCors from '@fastify/cors';
import Fastify from 'fastify';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LogLine, memoryDestination } from '../../server/test/harness.ts';
import fastifyDeadline, { type FastifyDeadlineOptions } from '../src/index.ts';

/** pino's level number for warn. */
const WARN = 40;

describe('fastify: routes added before the plugin', () => {
  const logs: LogLine[] = [];
  const app = Fastify({ loggerInstance: pino(memoryDestination(logs)) });
  let url = '';

  beforeAll(async () => {
    await app.register(fastifyCors, { origin: true });
    app.get('/early', { config: { deadline: { defaultMs: 300, maxMs: 400 } } }, async (request) => ({
      budgetMs: request.deadline?.budget.budgetMs,
    }));
    app.get('/early-plain', async (request) => ({ budgetMs: request.deadline?.budget.budgetMs }));
    // Wrong (defaultMs above maxMs), and not seen when added: it fails at its first request.
    app.get('/early-bad', { config: { deadline: { defaultMs: 5_000, maxMs: 1_000 } } }, async () => 'never');
    await app.register(fastifyDeadline, { serviceName: 'shop', defaultMs: 1_000, trust: () => true });
    app.get('/late', { config: { deadline: { defaultMs: 200 } } }, async (request) => ({
      budgetMs: request.deadline?.budget.budgetMs,
    }));
    url = await app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(() => app.close());

  it('read their config.deadline, with no warning', async () => {
    const early = await request(`${url}/early`);
    expect(await early.body.json()).toEqual({ budgetMs: 300 });
    // The route's maxMs bounds a caller (trusted here) as it does on a route added after the plugin.
    const asked = await request(`${url}/early`, { headers: { 'x-request-deadline': '900' } });
    expect(await asked.body.json()).toEqual({ budgetMs: 400 });
    const plain = await request(`${url}/early-plain`);
    expect(await plain.body.json()).toEqual({ budgetMs: 1_000 });
    const late = await request(`${url}/late`);
    expect(await late.body.json()).toEqual({ budgetMs: 200 });
    expect(logs.filter((line) => line.level >= WARN && !String(line.msg).startsWith('deadline:'))).toEqual([]);
  });

  it('a bad config.deadline on one is answered 500, naming the route and the option, at each of its requests', async () => {
    for (let i = 0; i < 2; i++) {
      const bad = await request(`${url}/early-bad`);
      expect(bad.statusCode).toBe(500);
      expect(await bad.body.json()).toMatchObject({
        code: 'ERR_INVALID_ARGUMENT',
        message: 'route GET /early-bad: config.deadline.defaultMs must be at most maxMs (1000); received 5000',
      });
    }
    // The routes beside it are not affected.
    const early = await request(`${url}/early`);
    expect(await early.body.json()).toEqual({ budgetMs: 300 });
  });

  it('cors (registered first) still answers its preflight', async () => {
    const preflight = await request(`${url}/late`, {
      method: 'OPTIONS',
      headers: { origin: 'http://shop.example', 'access-control-request-method': 'GET' },
    });
    await preflight.body.dump();
    expect(preflight.statusCode).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe('http://shop.example');
  });
});

describe('fastify-plugin 6', () => {
  it('gives the plugin what fastify-plugin 5 gives it, and fastify registers it so', async () => {
    // The copy @fastify/cors depends on (an app that has fastify-plugin 6 shares its copy with the plugin).
    const fromCors = createRequire(import.meta.resolve('@fastify/cors'));
    expect((fromCors('fastify-plugin/package.json') as { version: string }).version).toMatch(/^6\./);
    const fp6 = fromCors('fastify-plugin') as typeof import('fastify-plugin');
    const meta = { fastify: '5.x', name: '@deadline/fastify' };
    const rewrapped = fp6.default<FastifyDeadlineOptions>(
      (instance, options, done) => fastifyDeadline(instance, options, done),
      meta,
    );
    const marks = (plugin: object) =>
      ['skip-override', 'fastify.display-name', 'plugin-meta'].map(
        (name) => (plugin as Record<symbol, unknown>)[Symbol.for(name)],
      );
    expect(marks(rewrapped)).toEqual(marks(fastifyDeadline));
    const app = Fastify();
    await app.register(rewrapped, { serviceName: 'shop' });
    app.get('/', async (request) => ({ hop: request.deadline?.context.hop }));
    try {
      const url = await app.listen({ port: 0, host: '127.0.0.1' });
      expect(await (await request(url)).body.json()).toEqual({ hop: 'shop' });
    } finally {
      await app.close();
    }
  });
});
