import { runWithContext, traceFrom, withoutCancel } from '@deadline/core';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { deadlineMixin } from '../src/index.ts';

type LogLine = Record<string, unknown>;

function logger(mixin: ReturnType<typeof deadlineMixin>) {
  const lines: LogLine[] = [];
  const destination = { write: (text: string) => lines.push(JSON.parse(text)) };
  return { log: pino({ mixin }, destination), lines };
}

describe('deadlineMixin', () => {
  it('adds nothing outside a context, and a fresh object every time (pino merges into it)', () => {
    const mixin = deadlineMixin();
    const a = mixin({}, 30, undefined);
    expect(a).toEqual({});
    expect(mixin({}, 30, undefined)).not.toBe(a);
    const { log, lines } = logger(mixin);
    log.info({ req: 1 }, 'startup');
    log.info({ req: 2 }, 'again');
    expect(lines.map((l) => [l.msg, l.req, l.traceId])).toEqual([
      ['startup', 1, undefined],
      ['again', 2, undefined],
    ]);
  });

  it('adds the trace id, hop, budget, time left and bindings inside a context', () => {
    const { log, lines } = logger(deadlineMixin());
    const trace = traceFrom();
    runWithContext({ deadline: 800, trace, hop: 'orders', bindings: { tenant: 't1' } }, () => log.info('inside'));
    expect(lines[0]).toMatchObject({
      msg: 'inside',
      traceId: trace.traceId,
      hop: 'orders',
      budgetMs: 800,
      tenant: 't1',
    });
    expect(lines[0]?.remainingMs as number).toBeLessThanOrEqual(800);
    expect(lines[0]?.remainingMs as number).toBeGreaterThan(700);
  });

  it('marks detached work and leaves out budget fields without a deadline', () => {
    const { log, lines } = logger(deadlineMixin());
    const trace = traceFrom();
    runWithContext({ deadline: 800, trace, hop: 'orders' }, () => withoutCancel(() => log.info('audit')));
    expect(lines[0]).toMatchObject({ traceId: trace.traceId, detached: true });
    expect(lines[0]).not.toHaveProperty('budgetMs');
  });

  it('composes with the user’s own mixin (theirs wins on a clash)', () => {
    const { log, lines } = logger(deadlineMixin({ mixin: () => ({ region: 'eu-1', hop: 'custom' }) }));
    log.info('outside');
    runWithContext({ deadline: 500, hop: 'orders' }, () => log.info('inside'));
    expect(lines[0]).toMatchObject({ region: 'eu-1', hop: 'custom' });
    expect(lines[1]).toMatchObject({ region: 'eu-1', hop: 'custom', budgetMs: 500 });
  });

  it('checks its options', () => {
    expect(() => deadlineMixin({ mixin: 'x' as never })).toThrow(/mixin must be a function/);
  });
});
