/**
 * Two copies of @deadline/core in one process (a nested node_modules, a bundled dependency) must behave as one:
 * the same AsyncLocalStorage, deadlines and errors recognised, cancellation carried across. Here the built
 * dist/ and the TypeScript sources are two separate module graphs.
 */
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import * as src from '../src/index.ts';

const distUrl = new URL('../dist/index.js', import.meta.url);

const built = existsSync(distUrl);

describe.runIf(built || process.env.CI)(
  built ? 'two copies of the package' : 'two copies — skipped: run `npm run build` first, one copy is dist/',
  () => {
    it('share contexts, deadlines, errors and cancellation', async () => {
      const dist = (await import(distUrl.href)) as typeof src;
      expect(dist.runWithDeadline).not.toBe(src.runWithDeadline);

      await dist.runWithDeadline(800, async (outer) => {
        // The context one copy set is the one the other copy sees.
        expect(src.currentContext()).toBe(outer);
        expect(src.currentDeadline()).toBeInstanceOf(src.Deadline);
        expect(src.remainingMs()).toBeLessThanOrEqual(800);

        // Nesting across copies: the earlier deadline still wins, cancellation still flows down.
        await src.runWithDeadline(5_000, async (inner) => {
          expect(inner.deadline.expiresAt).toBe(outer.deadline.expiresAt);
          const innerSignal = src.currentSignal() as AbortSignal;
          outer.cancel('from the other copy');
          expect(innerSignal.aborted).toBe(true);
          expect(innerSignal.reason).toBeInstanceOf(src.CancelledError);
          expect(() => src.timeoutFor('db')).toThrow(dist.CancelledError);
        });
      });

      const error = new dist.DeadlineExceededError({ phase: 'before-call' });
      expect(error).toBeInstanceOf(src.DeadlineExceededError);
      expect(src.isDeadlineExceededError(error)).toBe(true);
    });
  },
);
