/** The unawaited-work suite (test/support/unawaited-work.ts) on Koa 3 and Koa 2. */
import { createServer } from 'node:http';
import Koa from 'koa';
import koa2 from 'koa2';
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

unawaitedWorkSuite({ 'koa 3': on(Koa), 'koa 2': on(koa2 as unknown as typeof Koa) });
