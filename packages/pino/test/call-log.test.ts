/** One line per outgoing call, written by `logCalls` from the core's diagnostics events. */
import { createContext, DeadlineExceededError, runWithContext, traceFrom } from '@deadline/core';
import { OutgoingCall } from '@deadline/core/internal';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { logCalls } from '../src/index.ts';

type LogLine = Record<string, unknown>;
const stops: (() => void)[] = [];
afterEach(() => {
  for (const stop of stops.splice(0)) stop();
});

function logger() {
  const lines: LogLine[] = [];
  const log = pino({ level: 'debug' }, { write: (text: string) => lines.push(JSON.parse(text)) });
  return { log, lines };
}

const trace = traceFrom('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', undefined);

describe('logCalls', () => {
  it('a call that went well: target, time left before, timeout, elapsed, status, outcome', async () => {
    const { log, lines } = logger();
    stops.push(logCalls(log));
    const before = performance.now();
    await runWithContext({ deadline: 1_000, hop: 'orders', trace }, async () => {
      const call = OutgoingCall.start('GET http://inventory/stock', { marginMs: 20 });
      call.end(undefined, 200);
    });
    const elapsed = performance.now() - before;
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 30,
      msg: 'deadline: call ok',
      traceId: '0af7651916cd43dd8448eb211c80319c',
      hop: 'orders',
      target: 'GET http://inventory/stock',
      statusCode: 200,
      outcome: 'ok',
    });
    // The budget less what had passed by the call's start (at most all of it, however slow the machine).
    expect(lines[0]?.remainingMs).toBeGreaterThanOrEqual(1_000 - elapsed - 1);
    expect(lines[0]?.timeoutMs).toBeLessThanOrEqual(980);
    expect(typeof lines[0]?.elapsedMs).toBe('number');
  });

  it('a call cut off, and one refused for lack of time, at warn with phase and whose', async () => {
    const { log, lines } = logger();
    stops.push(logCalls(log, { level: 'debug' }));
    await runWithContext({ deadline: 30, hop: 'orders' }, async () => {
      const call = OutgoingCall.start('SELECT orders');
      const error = await new Promise((resolve) => call.onStop(resolve));
      call.end(error);
    });
    const ctx = createContext({ root: true, deadline: 0.5, hop: 'orders' });
    expect(() => ctx.run(() => OutgoingCall.start('GET http://inventory/'))).toThrow(DeadlineExceededError);
    expect(lines.map((l) => [l.level, l.target, l.outcome, l.phase])).toEqual([
      [40, 'SELECT orders', 'deadline_exceeded', 'during-call'],
      [40, 'GET http://inventory/', 'deadline_exceeded', 'before-call'],
    ]);
    expect(lines[0]?.whose).toBe('local');
  });

  it('stops when asked, and a throwing logger breaks nothing', async () => {
    const stop = logCalls({
      info: () => {
        throw new Error('disk full');
      },
      warn: () => {},
    });
    await runWithContext({ deadline: 1_000 }, async () => OutgoingCall.start('x').end());
    stop();
    const { log, lines } = logger();
    stops.push(logCalls(log));
    stops.shift()?.();
    await runWithContext({ deadline: 1_000 }, async () => OutgoingCall.start('x').end());
    expect(lines).toHaveLength(0);
  });
});
