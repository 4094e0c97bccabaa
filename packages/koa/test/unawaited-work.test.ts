/** The unawaited-work suite (test/support/unawaited-work.ts) on Koa 3. */
import { createServer } from 'node:http';
import Koa from 'koa';
import {
  closeServer,
  listen,
  memoryLogger,
  type StartHost,
  unawaitedWorkSuite,
} from '../../../test/support/unawaited-work.ts';
import { deadline } from '../src/index.ts';

const on =
  (Framework: typeof Koa): StartHost =>
  async (route, options) => {
    const { logger, lines } = memoryLogger();
    const app = new Framework();
    app.use(deadline({ serviceName: 'orders', logger, ...options }));
    app.use(async (ctx) => {
      if (ctx.path !== '/route') return;
      await route((body) => {
        ctx.body = body;
      });
    });
    const server = createServer(app.callback());
    return { url: await listen(server), lines, close: () => closeServer(server) };
  };

// Koa 3: the middleware is the same code under Koa 2, whose conformance suite runs in koa.test.ts.
unawaitedWorkSuite({ 'koa 3': on(Koa) });
