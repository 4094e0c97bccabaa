/**
 * A websocket route (`@fastify/websocket`) behind the plugin: the upgrade goes through fastify's hooks, so it gets
 * a request context — but the socket lives as long as it is open, not as long as a request budget. A real `ws`
 * client talks to it past the plugin's default budget.
 */
import diagnostics from 'node:diagnostics_channel';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { currentContext, DeadlineExceededError, timeoutFor } from '@deadline/core';
import { REQUEST_END_CHANNEL, type RequestLine } from '@deadline/server';
import fastifyWebsocket from '@fastify/websocket';
import Fastify from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { type LogLine, memoryDestination } from '../../server/test/harness.ts';
import fastifyDeadline from '../src/index.ts';

const DEFAULT_MS = 300;

/** The end-of-request line for `path`, when it is published (the request's end). */
function nextLine(path: string): Promise<RequestLine> {
  return new Promise((resolve) => {
    const listener = (message: unknown) => {
      if ((message as RequestLine).path !== path) return;
      diagnostics.unsubscribe(REQUEST_END_CHANNEL, listener);
      resolve(message as RequestLine);
    };
    diagnostics.subscribe(REQUEST_END_CHANNEL, listener);
  });
}

/** How an outgoing call made now would be bounded: `unbounded`, `bounded`, or `refused` (no time left). */
function boundNow(): string {
  try {
    return timeoutFor('db') === undefined ? 'unbounded' : 'bounded';
  } catch (error) {
    return error instanceof DeadlineExceededError ? 'refused' : 'error';
  }
}

describe('fastify: a websocket route is not put under a request budget', () => {
  const logs: LogLine[] = [];
  const app = Fastify({ loggerInstance: pino(memoryDestination(logs)) });
  let url: string;

  beforeAll(async () => {
    await app.register(fastifyDeadline, { serviceName: 'chat', defaultMs: DEFAULT_MS });
    await app.register(fastifyWebsocket);
    app.get('/chat', { websocket: true }, (socket, request) => {
      socket.on('message', (data) => {
        socket.send(JSON.stringify({ echo: String(data), remainingMs: String(request.deadline?.remainingMs()) }));
      });
      // Work of the handler itself, in the upgrade request's context, after the default budget: not refused.
      void sleep(DEFAULT_MS * 2).then(() => {
        socket.send(JSON.stringify({ handler: boundNow(), inContext: currentContext() === request.deadline?.context }));
      });
    });
    app.get('/plain', async () => 'plain');
    url = (await app.listen({ port: 0, host: '127.0.0.1' })).replace('http', 'ws');
  });
  afterAll(() => app.close());

  it('the socket outlives the default budget; the handler’s own work is not refused; closing ends the request', async () => {
    const client = new WebSocket(`${url}/chat`);
    const messages: Record<string, string>[] = [];
    const next = () =>
      new Promise<Record<string, string>>((resolve) => {
        client.once('message', (data) => {
          const message = JSON.parse(String(data));
          messages.push(message);
          resolve(message);
        });
      });
    await once(client, 'open');
    const fromHandler = await next(); // sent by the handler after twice the default budget
    expect(fromHandler).toEqual({ handler: 'unbounded', inContext: true });
    const reply = next();
    client.send('still here');
    expect(await reply).toEqual({ echo: 'still here', remainingMs: 'Infinity' });
    expect(client.readyState).toBe(WebSocket.OPEN);
    const ended = nextLine('/chat');
    client.close();
    await once(client, 'close');
    // The request ends with the socket: one line, no budget, nothing cut.
    expect(await ended).toMatchObject({ path: '/chat', budgetSource: 'none' });
    expect(logs.filter((l) => String(l.msg).includes('still streaming'))).toEqual([]);
  });

  it('plain routes beside it keep the default budget', async () => {
    const ended = nextLine('/plain');
    const response = await fetch(`${url.replace('ws', 'http')}/plain`);
    expect(await response.text()).toBe('plain');
    expect(await ended).toMatchObject({ budgetSource: 'default', budgetMs: DEFAULT_MS, outcome: 'ok' });
  });
});
