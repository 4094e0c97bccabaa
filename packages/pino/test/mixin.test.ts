import { runWithContext, traceFrom, withoutCancel } from '@deadline/core';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { deadlineMixin, OTEL_LOG_KEYS } from '../src/index.ts';

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
    const before = performance.now();
    runWithContext({ deadline: 800, trace, hop: 'orders', bindings: { tenant: 't1' } }, () => log.info('inside'));
    const elapsed = performance.now() - before;
    expect(lines[0]).toMatchObject({
      msg: 'inside',
      traceId: trace.traceId,
      hop: 'orders',
      budgetMs: 800,
      tenant: 't1',
    });
    expect(lines[0]?.remainingMs as number).toBeLessThanOrEqual(800);
    // The budget less what had passed by the line (at most all of it, however slow the machine).
    expect(lines[0]?.remainingMs as number).toBeGreaterThanOrEqual(800 - elapsed - 1);
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

  it('writes the span id beside the trace id; logKeys renames them, OTEL_LOG_KEYS as OpenTelemetry names them', () => {
    const trace = traceFrom('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
    const ours = logger(deadlineMixin());
    runWithContext({ deadline: 800, trace }, () => ours.log.info('ours'));
    expect(ours.lines[0]).toMatchObject({ traceId: trace.traceId, spanId: trace.spanId });
    expect(ours.lines[0]).not.toHaveProperty('trace_flags');

    const otel = logger(deadlineMixin({ logKeys: OTEL_LOG_KEYS }));
    runWithContext({ deadline: 800, trace }, () => otel.log.info('otel'));
    expect(otel.lines[0]).toMatchObject({ trace_id: trace.traceId, span_id: trace.spanId, trace_flags: '01' });
    expect(otel.lines[0]).not.toHaveProperty('traceId');

    // Only the parts that have a name are written.
    const only = logger(deadlineMixin({ logKeys: { traceId: 'trace' } }));
    runWithContext({ deadline: 800, trace }, () => only.log.info('only'));
    expect(only.lines[0]).toMatchObject({ trace: trace.traceId });
    expect(only.lines[0]).not.toHaveProperty('spanId');
  });

  it('checks its options', () => {
    expect(() => deadlineMixin({ mixin: 'x' as never })).toThrow(/mixin must be a function/);
    expect(() => deadlineMixin({ logKeys: 'otel' as never })).toThrow(/logKeys must be an object/);
    expect(() => deadlineMixin({ logKeys: { spanId: '' } })).toThrow(/logKeys.spanId must be a non-empty string/);
    expect(() => deadlineMixin({ logKeys: { traceId: 42 as never } })).toThrow(/logKeys.traceId/);
  });
});
