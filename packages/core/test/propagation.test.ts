/**
 * The context must survive every way Node hands work from one tick to another.
 */
import { EventEmitter, once } from 'node:events';
import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { bindContext, currentContext, type OwnedContext, runWithDeadline } from '../src/index.ts';

function inContext(fn: (ctx: OwnedContext) => Promise<unknown>) {
  return runWithDeadline(5_000, fn);
}

describe('AsyncLocalStorage propagation', () => {
  it('survives await and promise chains', () =>
    inContext(async (ctx) => {
      await null;
      expect(currentContext()).toBe(ctx);
      const seen = await Promise.resolve(1)
        .then(() => currentContext())
        .then((c) => [c, currentContext()]);
      expect(seen).toEqual([ctx, ctx]);
      await Promise.all([1, 2].map(async () => expect(currentContext()).toBe(ctx)));
    }));

  it('survives setTimeout, setImmediate, queueMicrotask and process.nextTick', () =>
    inContext(async (ctx) => {
      const seen = await Promise.all([
        new Promise((resolve) => setTimeout(() => resolve(currentContext()), 1)),
        new Promise((resolve) => setImmediate(() => resolve(currentContext()))),
        new Promise((resolve) => queueMicrotask(() => resolve(currentContext()))),
        new Promise((resolve) => process.nextTick(() => resolve(currentContext()))),
      ]);
      expect(seen).toEqual([ctx, ctx, ctx, ctx]);
    }));

  it('survives a thenable', () =>
    inContext(async (ctx) => {
      const seen = await {
        // biome-ignore lint/suspicious/noThenProperty: the thenable is the subject of the test
        then(resolve: (value: unknown) => void) {
          setTimeout(() => resolve(currentContext()), 1);
        },
      };
      expect(seen).toBe(ctx);
    }));

  it('reaches an EventEmitter listener registered inside when the emit happens inside', () =>
    inContext(async (ctx) => {
      const emitter = new EventEmitter();
      const seen = new Promise((resolve) => emitter.on('data', () => resolve(currentContext())));
      setTimeout(() => emitter.emit('data'), 1);
      expect(await seen).toBe(ctx);
    }));

  it('reaches a bound EventEmitter listener even when the emit comes from outside', async () => {
    const emitter = new EventEmitter();
    let ctx: OwnedContext | undefined;
    const seen = new Promise((resolve) => {
      runWithDeadline(5_000, (c) => {
        ctx = c;
        emitter.on(
          'data',
          bindContext(() => resolve(currentContext())),
        );
      });
    });
    // Emitted from outside any context (as a shared connection or a pool would).
    expect(currentContext()).toBeUndefined();
    emitter.emit('data');
    expect(await seen).toBe(ctx);
  });

  it('survives stream.pipeline', () =>
    inContext(async (ctx) => {
      const seen = new Set<unknown>();
      async function* source() {
        for (let i = 0; i < 5; i++) {
          await new Promise((resolve) => setTimeout(resolve, 1));
          seen.add(currentContext());
          yield `chunk${i}`;
        }
      }
      const upper = new Transform({
        transform(chunk, _enc, done) {
          seen.add(currentContext());
          done(null, String(chunk).toUpperCase());
        },
      });
      const out: string[] = [];
      const sink = new Writable({
        write(chunk, _enc, done) {
          seen.add(currentContext());
          out.push(String(chunk));
          setImmediate(done);
        },
      });
      await pipeline(Readable.from(source()), upper, sink);
      expect(out).toEqual(['CHUNK0', 'CHUNK1', 'CHUNK2', 'CHUNK3', 'CHUNK4']);
      expect([...seen]).toEqual([ctx]);
    }));

  it('keeps concurrent contexts apart', async () => {
    const results = await Promise.all(
      [300, 200, 100].map((budget) =>
        runWithDeadline(budget * 100, async (ctx) => {
          await new Promise((resolve) => setTimeout(resolve, budget / 20));
          return currentContext() === ctx;
        }),
      ),
    );
    expect(results).toEqual([true, true, true]);
  });

  it('binds nothing outside a context', async () => {
    const fn = () => 1;
    expect(bindContext(fn)).toBe(fn);
    const emitter = new EventEmitter();
    setImmediate(() => emitter.emit('x'));
    await once(emitter, 'x');
  });
});
