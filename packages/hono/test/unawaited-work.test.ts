/** The unawaited-work suite (test/support/unawaited-work.ts) on Hono under @hono/node-server. */
import type { Server } from 'node:http';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { closeServer, memoryLogger, type StartHost, unawaitedWorkSuite } from '../../../test/support/unawaited-work.ts';
import { type DeadlineEnv, deadline, deadlineErrors } from '../src/index.ts';

const hono: StartHost = async (route, options) => {
  const { logger, lines } = memoryLogger();
  const app = new Hono<DeadlineEnv>();
  app.use(deadline({ serviceName: 'orders', logger, ...options }));
  app.onError(deadlineErrors());
  app.get('/route', async (c) => {
    let body = '';
    await route((answer) => {
      body = answer;
    });
    return c.text(body);
  });
  const server = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as Server));
  });
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, lines, close: () => closeServer(server) };
};

unawaitedWorkSuite({ hono });
