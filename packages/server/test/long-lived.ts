/**
 * Long-lived routes — server-sent events, long polls — on every server adapter, through a real listening server:
 * a real SSE client (undici's `EventSource`) and a real HTTP client. A route that opts out is not cut by the
 * default budget; one that does not is cut at it, with one log line saying how to opt out. A caller's budget
 * still bounds an opted-out route's outgoing calls. Each adapter's test file runs it with its own harness.
 */
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { DeadlineExceededError, timeoutFor } from '@deadline/core';
import { Agent, EventSource, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Harness, Io, LogLine, Route, Running } from './harness.ts';

const EVENTS = 6;
const EVERY_MS = 200;
/**
 * The routes' default budget: the stream that does not opt out is cut at it, after the events that fit in it (3, at
 * 200, 400 and 600 ms; a slow machine delays them, and the first has 500 ms to spare).
 */
const DEFAULT_MS = 700;
/**
 * The budget a caller gives the opted-out stream, which bounds its outgoing calls: the events at 200 ms and later are
 * inside it until a slow machine delays them past it (the first has 700 ms to spare); the last, at 1.2 s, is past it.
 */
const CALLER_MS = 900;

/** Six events, one every 200 ms; each says how the route's outgoing calls are bounded at that moment. */
async function* sixEvents(io: Io): AsyncGenerator<string> {
  for (let i = 1; i <= EVENTS; i++) {
    await sleep(EVERY_MS);
    let bound: string;
    try {
      const ms = timeoutFor('db');
      bound = ms === undefined ? 'unbounded' : `bounded`;
    } catch (error) {
      bound = error instanceof DeadlineExceededError ? 'refused' : 'error';
    }
    yield `data: ${JSON.stringify({ i, bound, remainingMs: String(io.deadline.remainingMs()) })}\n\n`;
  }
}

interface Received {
  events: { i: number; bound: string; remainingMs: string }[];
  /** How the stream ended: `complete` (all six, then the server closed), `error`. */
  end: 'complete' | 'error';
  elapsedMs: number;
}

/** Reads an SSE stream with a real EventSource until the server closes it, or it fails. Never reconnects. */
function readEvents(url: string): Promise<Received> {
  return new Promise((resolve) => {
    const started = performance.now();
    const events: Received['events'] = [];
    const source = new EventSource(url);
    source.onmessage = (message) => {
      events.push(JSON.parse(message.data as string));
    };
    source.onerror = () => {
      source.close();
      resolve({ events, end: events.length === EVENTS ? 'complete' : 'error', elapsedMs: performance.now() - started });
    };
  });
}

function cutLines(logs: LogLine[]): LogLine[] {
  return logs.filter((line) => String(line.msg).includes('still streaming'));
}

export function longLivedSuite(harness: Harness): void {
  describe(`${harness.name}: long-lived routes`, () => {
    let server: Running;
    const agent = new Agent({ keepAliveTimeout: 10, keepAliveMaxTimeout: 10 });
    const signals: Record<string, Promise<unknown>> = {};
    const routes: Route[] = [
      { method: 'GET', path: '/events', handler: (io) => io.events(sixEvents(io)) },
      {
        method: 'GET',
        path: '/events-long',
        longLived: true,
        handler: (io) => {
          const signal = io.deadline.context.signal;
          signals[io.deadline.budget.source] = new Promise((resolve) => {
            signal?.addEventListener('abort', () => resolve(signal.reason), { once: true });
          });
          return io.events(sixEvents(io));
        },
      },
      {
        method: 'GET',
        path: '/poll',
        longLived: true,
        handler: async (io) => {
          await sleep(DEFAULT_MS + 300);
          io.reply(200, { remainingMs: String(io.deadline.remainingMs()), source: io.deadline.budget.source });
        },
      },
      {
        method: 'GET',
        path: '/poll-short',
        handler: async (io) => {
          // Works on past the default budget, then answers late: after its deadline passed, so after the 504 on any
          // machine. (Working from its start, a stall that outlasts both has the deadline and its own timer come due
          // in one turn, and its answer may go out ahead of the 504.)
          const signal = io.deadline.context.signal as AbortSignal;
          if (!signal.aborted) await once(signal, 'abort');
          await sleep(300);
          io.reply(200, { late: true });
        },
      },
    ];

    beforeAll(async () => {
      server = await harness.start({ serviceName: 'feed', defaultMs: DEFAULT_MS } as never, routes);
    });
    afterAll(async () => {
      await server.close();
      await agent.close();
    });

    it('an SSE route that does not opt out is cut at the default budget, with one line saying how to opt out', async () => {
      const received = await readEvents(`${server.url}/events`);
      expect(received.end).toBe('error');
      // Some events, then the cut, well before the last.
      expect(received.events.length).toBeGreaterThanOrEqual(1);
      expect(received.events.length).toBeLessThan(EVENTS);
      expect(received.elapsedMs).toBeGreaterThanOrEqual(DEFAULT_MS - 50);
      expect(received.elapsedMs).toBeLessThan(DEFAULT_MS + 1_500);
      const lines = cutLines(server.logs);
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatchObject({ level: 40, hop: 'feed', path: '/events', budgetMs: DEFAULT_MS });
      expect(String(lines[0]?.msg)).toContain('config: { deadline: false }');
      expect(String(lines[0]?.msg)).toContain('longLived()');
    });

    it('an SSE route that opts out gets all six events over 1.2 s: no default budget, nothing cut', async () => {
      const before = cutLines(server.logs).length;
      const received = await readEvents(`${server.url}/events-long`);
      expect(received.end).toBe('complete');
      expect(received.events.map((e) => e.i)).toEqual([1, 2, 3, 4, 5, 6]);
      expect(received.events.every((e) => e.bound === 'unbounded' && e.remainingMs === 'Infinity')).toBe(true);
      expect(received.elapsedMs).toBeGreaterThan(EVENTS * EVERY_MS - 100);
      expect(cutLines(server.logs).length).toBe(before);
    });

    it('a caller’s budget still bounds the opted-out route’s outgoing calls, but does not cut its stream', async () => {
      const response = await request(`${server.url}/events-long`, {
        headers: { 'x-request-deadline': String(CALLER_MS), accept: 'text/event-stream' },
        dispatcher: agent,
      });
      expect(response.statusCode).toBe(200);
      const text = await response.body.text();
      const events = text
        .split('\n\n')
        .filter((chunk) => chunk.startsWith('data: '))
        .map((chunk) => JSON.parse(chunk.slice('data: '.length)) as Received['events'][number]);
      expect(events.map((e) => e.i)).toEqual([1, 2, 3, 4, 5, 6]);
      // Bounded while inside the caller's budget, then refused before they are made: the first event's call is
      // bounded, the last's refused, and once refused never bounded again. Where the change falls depends on how
      // late a busy machine's timers ran (on a quiet one, after the fourth).
      const bounds = events.map((e) => e.bound);
      const bounded = bounds.filter((bound) => bound === 'bounded').length;
      expect(bounded).toBeGreaterThanOrEqual(1);
      expect(bounded).toBeLessThan(EVENTS);
      expect(bounds).toEqual([...Array(bounded).fill('bounded'), ...Array(EVENTS - bounded).fill('refused')]);
      expect(await signals.header).toBeInstanceOf(DeadlineExceededError);
    });

    it('a long poll that opts out answers after the default budget; one that does not gets 504', async () => {
      const [long, short] = await Promise.all([
        request(`${server.url}/poll`, { dispatcher: agent }),
        request(`${server.url}/poll-short`, { dispatcher: agent }),
      ]);
      expect(long.statusCode).toBe(200);
      expect(await long.body.json()).toEqual({ remainingMs: 'Infinity', source: 'none' });
      expect(short.statusCode).toBe(504);
      await short.body.dump();
    });
  });
}
