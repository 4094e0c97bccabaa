/**
 * The two ways in: the global dispatcher (Node's built-in `fetch()` and undici's `request()` with no code
 * change) and the opt-in `fetch` wrapper.
 */
import { createContext, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { Agent, getGlobalDispatcher, request } from 'undici';
import { describe, expect, it } from 'vitest';
import { createFetch, DeadlineDispatcher, fetch as deadlineFetch, installGlobalDispatcher } from '../src/index.ts';
import { downstreamsPerTest, drip, echo, exceededBy, leftAfter, silent } from './servers.ts';

/** A downstream on loopback, closed after each test. */
const downstream = downstreamsPerTest();

describe('installGlobalDispatcher', () => {
  it("covers Node's built-in fetch and undici's request, and uninstalls", async () => {
    const server = await downstream(echo);
    const before = getGlobalDispatcher();
    const uninstall = installGlobalDispatcher();
    try {
      const [viaFetch, viaRequest] = await runWithDeadline(1_500, async () => {
        const fetched = await (await globalThis.fetch(server.url)).json();
        const requested = await (await request(server.url)).body.json();
        return [fetched, requested] as Record<string, string>[];
      });
      expect(Number(viaFetch?.['x-request-deadline'])).toBeLessThanOrEqual(1_500);
      expect(Number(viaRequest?.['x-request-deadline'])).toBeLessThanOrEqual(1_500);
      // Outside a context: untouched.
      const outside = (await (await globalThis.fetch(server.url)).json()) as Record<string, string>;
      expect(outside['x-request-deadline']).toBeUndefined();
    } finally {
      uninstall();
    }
    expect(getGlobalDispatcher()).toBe(before);
  });

  it('installing twice replaces the first installation instead of stacking', async () => {
    const server = await downstream(echo);
    const first = installGlobalDispatcher({ marginMs: 100 });
    const second = installGlobalDispatcher({ marginMs: 200 });
    try {
      const started = performance.now();
      const seen = (await runWithDeadline(1_000, async () => (await globalThis.fetch(server.url)).json())) as Record<
        string,
        string
      >;
      const budget = Number(seen['x-request-deadline']);
      // One layer with margin 200, not 100 + 200: within a few ms of 800 on a quiet machine (stacked, it would be 700
      // at most), and never below what was left less 200 when it was sent.
      expect(budget).toBeLessThanOrEqual(800);
      expect(budget).toBeGreaterThanOrEqual(leftAfter(1_000, started) - 200);
    } finally {
      second();
      first();
    }
  });

  it('the global fetch rejects with TypeError whose cause is the deadline error', async () => {
    const server = await downstream(silent);
    const uninstall = installGlobalDispatcher();
    try {
      const error = await runWithDeadline(200, () => globalThis.fetch(server.url)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TypeError);
      expect((error as Error).cause).toBeInstanceOf(DeadlineExceededError);
    } finally {
      uninstall();
    }
  });
});

describe('createFetch / fetch', () => {
  it('rejects with the deadline error itself', async () => {
    const server = await downstream(silent);
    const fetchIt = createFetch({ dispatcher: new Agent() });
    const closed = server.nextClose();
    const started = performance.now();
    const error = await runWithDeadline(250, () => fetchIt(server.url)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(performance.now() - started).toBeGreaterThanOrEqual(240);
    await closed;
  });

  it('refuses with no time left, without connecting', async () => {
    const server = await downstream(echo);
    const ctx = createContext({ root: true, deadline: 0.5 });
    const error = await ctx.run(() => deadlineFetch(server.url)).catch((e: unknown) => e);
    expect(error).toMatchObject({ phase: 'before-call' });
    expect(server.connections).toBe(0);
  });

  it('a response body still streaming at the deadline is cut', async () => {
    const server = await downstream(drip(50));
    const closed = server.nextClose();
    const error = await runWithDeadline(300, async () => {
      const res = await deadlineFetch(server.url);
      expect(res.status).toBe(200);
      return res.text();
    }).catch((e: unknown) => e);
    await closed;
    expect(error).toBeInstanceOf(Error);
    const cause = (error as Error).cause ?? error;
    expect(cause).toBeInstanceOf(DeadlineExceededError);
  });

  it('passes through outside a context', async () => {
    const server = await downstream(echo);
    const seen = (await (await deadlineFetch(server.url, { headers: { 'x-a': '1' } })).json()) as Record<
      string,
      string
    >;
    expect(seen['x-a']).toBe('1');
    expect(seen['x-request-deadline']).toBeUndefined();
  });
});

describe('DeadlineDispatcher', () => {
  it("takes fetch's own handler as it comes: budget sent, a downstream's 504 naming its hop, the cut at the deadline", async () => {
    const base = new Agent();
    const dispatcher = new DeadlineDispatcher({ dispatcher: base });
    const init = { dispatcher } as unknown as RequestInit;
    try {
      const server = await downstream(echo);
      const seen = (await runWithDeadline(1_000, async () => (await fetch(server.url, init)).json())) as Record<
        string,
        string
      >;
      expect(Number(seen['x-request-deadline'])).toBeLessThanOrEqual(1_000);
      const exceeded = await downstream(exceededBy('inventory'));
      const downstreamError = await runWithDeadline(1_000, () => fetch(exceeded.url, init)).catch((e: unknown) => e);
      expect((downstreamError as Error).cause).toMatchObject({ whose: 'downstream:inventory' });
      const hanging = await downstream(silent);
      const closed = hanging.nextClose();
      const cut = await runWithDeadline(200, () => fetch(hanging.url, init)).catch((e: unknown) => e);
      expect((cut as Error).cause).toBeInstanceOf(DeadlineExceededError);
      await closed;
    } finally {
      await dispatcher.close();
    }
    expect(base.closed).toBe(true);
  });

  it("listeners of its 'connect' and 'disconnect' hear the dispatcher it sends through", async () => {
    const dispatcher = new DeadlineDispatcher();
    const server = await downstream(echo);
    const connected = new Promise<string>((resolve) =>
      dispatcher.once('connect', (origin) => resolve(new URL(String(origin)).origin)),
    );
    await (await fetch(server.url, { dispatcher } as unknown as RequestInit)).text();
    expect(await connected).toBe(new URL(server.url).origin);
    const disconnected = new Promise<void>((resolve) => dispatcher.once('disconnect', () => resolve()));
    await dispatcher.close();
    await disconnected;
  });
});
