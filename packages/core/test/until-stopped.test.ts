/**
 * Racing work against a context's stop (core's untilStopped): the work's result, or the stop reason first.
 */
import { describe, expect, it } from 'vitest';
import { CancelledError, createContext, DeadlineExceededError } from '../src/index.ts';
import { untilStopped } from '../src/internal.ts';

describe('untilStopped', () => {
  it("the work's result, and its listener gone once it settles", async () => {
    const ctx = createContext({ deadline: 5_000 });
    await expect(untilStopped(ctx, async () => 42)).resolves.toBe(42);
    await expect(untilStopped(ctx, async () => Promise.reject(new Error('failed')))).rejects.toThrow('failed');
    // Settled work left nothing listening: cancelling now rejects nothing and throws nothing.
    ctx.cancel(new CancelledError('late'));
    ctx.end();
  });

  it('the stop reason when the context stops first; `stopped` hears it first', async () => {
    const ctx = createContext({ deadline: 50 });
    const heard: unknown[] = [];
    const never = new Promise<never>(() => {});
    const error = await untilStopped(
      ctx,
      () => never,
      (reason) => heard.push(reason),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(heard).toEqual([error]);
    ctx.end();
  });

  it('work is not started in a context that has already stopped', async () => {
    const ctx = createContext({});
    ctx.cancel(new CancelledError('gone'));
    let started = false;
    await expect(
      untilStopped(ctx, async () => {
        started = true;
      }),
    ).rejects.toBeInstanceOf(CancelledError);
    expect(started).toBe(false);
    ctx.end();
  });
});
