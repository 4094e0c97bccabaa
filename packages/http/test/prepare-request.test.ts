/** `prepareHttpRequest` with node:http itself: the helper that axios, got and hand-written clients build on. */
import http from 'node:http';
import { createContext, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { describe, expect, it } from 'vitest';
import { prepareHttpRequest } from '../src/index.ts';
import { downstreamsPerTest, echo, exceededBy, silent } from './servers.ts';

/** A downstream on loopback, closed after each test. */
const downstream = downstreamsPerTest();

/** One GET with node:http, the way the helper's documentation shows. Resolves with the body or the error. */
function get(url: string, headers?: Record<string, string>): Promise<{ body?: string; error?: unknown }> {
  const call = prepareHttpRequest('GET', url, { headers });
  return new Promise((resolve) => {
    const req = http.request(url, { headers: call.headers, signal: call.signal, timeout: call.timeout });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        body += chunk;
      });
      res.on('end', () => {
        const error = call.done(res);
        resolve(error === undefined ? { body } : { error });
      });
      res.on('error', (error) => resolve({ error: call.done(error) }));
    });
    req.on('error', (error) => resolve({ error: call.done(error) }));
    req.end();
  });
}

describe('prepareHttpRequest with node:http', () => {
  it('sends the budget over the caller headers, and nothing outside a context', async () => {
    const server = await downstream(echo);
    const inside = await runWithDeadline(1_000, () => get(server.url, { 'X-Request-Deadline': '99999', 'x-a': '1' }));
    const seen = JSON.parse(inside.body as string);
    expect(Number(seen['x-request-deadline'])).toBeLessThanOrEqual(1_000);
    expect(seen['x-a']).toBe('1');
    const outside = JSON.parse((await get(server.url)).body as string);
    expect(outside['x-request-deadline']).toBeUndefined();
  });

  it('the signal aborts the request at the deadline; the socket is closed', async () => {
    const server = await downstream(silent);
    const closed = server.nextClose();
    const started = performance.now();
    const { error } = await runWithDeadline(250, () => get(server.url));
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'during-call' });
    expect(performance.now() - started).toBeGreaterThanOrEqual(240);
    await closed;
  });

  it('throws before anything is sent when no time is left', async () => {
    const server = await downstream(echo);
    const ctx = createContext({ root: true, deadline: 0.5 });
    expect(() => ctx.run(() => prepareHttpRequest('GET', server.url))).toThrow(DeadlineExceededError);
    expect(server.connections).toBe(0);
  });

  it("done() turns a downstream's 504 naming its hop into DeadlineExceededError", async () => {
    const server = await downstream(exceededBy('inventory'));
    const { error } = await runWithDeadline(1_000, () => get(server.url));
    expect(error).toMatchObject({ whose: 'downstream:inventory' });
  });

  it("done() reads a fetch Response's status too", async () => {
    const server = await downstream(exceededBy('inventory'));
    const error = await runWithDeadline(1_000, async () => {
      const call = prepareHttpRequest('GET', server.url);
      const res = await fetch(server.url, { headers: call.headers as Record<string, string> });
      await res.arrayBuffer();
      return call.done(res);
    });
    expect(error).toMatchObject({ whose: 'downstream:inventory' });
  });

  it('bad options fail at once, naming the option (a cap below the minimum)', () => {
    expect(() => prepareHttpRequest('GET', 'http://127.0.0.1:9/', {}, { minMs: 50, maxMs: 10 })).toThrow('maxMs');
  });

  it('no signal and no timeout where nothing can stop the call', () => {
    const call = prepareHttpRequest('GET', 'http://127.0.0.1:9/');
    expect(call.signal).toBeUndefined();
    expect(call.timeout).toBeUndefined();
    expect(call.done()).toBeUndefined();
  });
});
