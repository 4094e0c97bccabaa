/**
 * The unawaited-work suite (test/support/unawaited-work.ts) on fastify, express and `node:http`.
 */
import { createServer } from 'node:http';
import { deadline, deadlineErrors } from '@deadline/express';
import fastifyDeadline from '@deadline/fastify';
import { deadlineHandler } from '@deadline/server';
import express from 'express';
import Fastify from 'fastify';
import {
  closeServer,
  listen,
  memoryLogger,
  type StartHost,
  unawaitedWorkSuite,
} from '../../../test/support/unawaited-work.ts';

/** The same route on each host, with the library's options and a logger whose lines the test reads. */
const hosts: Record<string, StartHost> = {
  async fastify(route, options) {
    const { logger, lines } = memoryLogger();
    const app = Fastify({ loggerInstance: logger, forceCloseConnections: true });
    await app.register(fastifyDeadline, { serviceName: 'orders', ...options });
    app.get('/route', (_request, reply) => route((body) => reply.send(body)));
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    return { url, lines, close: () => app.close() };
  },
  async express(route, options) {
    const { logger, lines } = memoryLogger();
    const app = express();
    app.use(deadline({ serviceName: 'orders', logger, ...options }));
    app.get('/route', (_req, res) => route((body) => res.send(body)));
    app.use(deadlineErrors());
    const server = createServer(app);
    return { url: await listen(server), lines, close: () => closeServer(server) };
  },
  async 'node:http'(route, options) {
    const { logger, lines } = memoryLogger();
    const server = createServer(
      deadlineHandler((_req, res) => route((body) => res.end(body)), { serviceName: 'orders', logger, ...options }),
    );
    return { url: await listen(server), lines, close: () => closeServer(server) };
  },
};

unawaitedWorkSuite(hosts);
