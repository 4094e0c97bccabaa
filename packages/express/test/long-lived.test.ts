/**
 * Long-lived traffic beside an express app with the middleware: a `ws` websocket server on the same HTTP server
 * (its upgrades never pass through express, and are not put under a request budget), and the app-level
 * `longLived` option for a long poll. SSE and `longLived()` on a route are in the shared suite (express.test.ts).
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { currentContext, runWithDeadline } from '@deadline/core';
import express from 'express';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { deadline, deadlineErrors } from '../src/index.ts';

const DEFAULT_MS = 300;

describe('express: long-lived traffic', () => {
  const app = express();
  app.use(deadline({ serviceName: 'chat', defaultMs: DEFAULT_MS, longLived: (req) => req.url === '/poll' }));
  app.get('/poll', async (req, res) => {
    await sleep(DEFAULT_MS * 2);
    res.json({ remainingMs: String(req.deadline?.remainingMs()), source: req.deadline?.budget.source });
  });
  app.get('/short', async (req, res) => {
    // Works on past its default budget, then answers late: after its deadline passed, so after the 504 on any
    // machine. (Working from its start, a stall that outlasts both has the deadline and its own timer come due in
    // one turn, and its answer may go out ahead of the 504.)
    const signal = req.deadline?.context.signal as AbortSignal;
    if (!signal.aborted) await once(signal, 'abort');
    await sleep(DEFAULT_MS);
    res.json({ late: true });
  });
  app.use(deadlineErrors());
  let server: Server;
  let wss: WebSocketServer;
  let port: number;

  beforeAll(async () => {
    server = createServer(app);
    wss = new WebSocketServer({ server });
    wss.on('connection', (socket) => {
      socket.on('message', (data) => {
        // A message's work runs outside any request: the app gives it a budget of its own if it wants one.
        const reply = runWithDeadline(100, () => ({ echo: String(data), inContext: currentContext() !== undefined }));
        socket.send(JSON.stringify(reply));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    for (const client of wss.clients) client.terminate();
    wss.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('a ws socket on the same server lives past the default budget and answers', async () => {
    const client = new WebSocket(`ws://127.0.0.1:${port}/`);
    await once(client, 'open');
    const opened = performance.now();
    // Twice the default budget in: the socket is still open and served.
    await sleep(DEFAULT_MS * 2);
    client.send('still here');
    const [data] = (await once(client, 'message')) as [Buffer];
    expect(JSON.parse(String(data))).toEqual({ echo: 'still here', inContext: true });
    expect(performance.now() - opened).toBeGreaterThan(DEFAULT_MS * 2);
    expect(client.readyState).toBe(WebSocket.OPEN);
    client.close();
    await once(client, 'close');
  });

  it('the longLived option: a long poll answers after the default budget; other routes get 504', async () => {
    const [long, short] = await Promise.all([
      request(`http://127.0.0.1:${port}/poll`),
      request(`http://127.0.0.1:${port}/short`),
    ]);
    expect(long.statusCode).toBe(200);
    expect(await long.body.json()).toEqual({ remainingMs: 'Infinity', source: 'none' });
    expect(short.statusCode).toBe(504);
    await short.body.dump();
  });

  it('a throwing longLived predicate is logged and the request keeps the default budget', async () => {
    const warnings: unknown[] = [];
    const logger = { info() {}, warn: (fields: object) => warnings.push(fields) };
    const throwing = express();
    throwing.use(
      deadline({
        serviceName: 'chat',
        defaultMs: DEFAULT_MS,
        logger,
        longLived: () => {
          throw new Error('predicate bug');
        },
      }),
    );
    throwing.get('/', (req, res) => {
      res.json({ budgetMs: req.deadline?.budget.budgetMs });
    });
    const other = createServer(throwing);
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    try {
      const response = await request(`http://127.0.0.1:${(other.address() as AddressInfo).port}/`);
      expect(await response.body.json()).toEqual({ budgetMs: DEFAULT_MS });
      expect(warnings).toContainEqual(expect.objectContaining({ hop: 'chat' }));
    } finally {
      other.closeAllConnections();
      await new Promise((resolve) => other.close(resolve));
    }
  });
});
