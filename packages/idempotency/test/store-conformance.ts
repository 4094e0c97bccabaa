/**
 * What every store must do, run against PostgreSQL and Redis (pg-store.test.ts, redis-store.test.ts): an atomic
 * claim, a lock that ends on the store's clock, writes that count only from the key's owner.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, REDIS, requireService } from '../../../test/support/services.js';
import type { ClaimInput, IdempotencyStore, StoredResponse } from '../src/index.js';
import { openStore, type StoreName } from './harness.js';

const input = (over: Partial<ClaimInput> = {}): ClaimInput => ({
  scope: randomUUID(),
  fingerprint: 'f1',
  token: randomUUID(),
  secret: randomUUID(),
  lockMs: 30_000,
  ttlMs: 86_400_000,
  ...over,
});

const response = (over: Partial<StoredResponse> = {}): StoredResponse => ({
  status: 201,
  headers: { 'content-type': 'application/json', location: '/orders/7' },
  body: Buffer.from('{"id":7}'),
  bodyBytes: 8,
  ...over,
});

const stepNames = fc
  .string({ minLength: 1, maxLength: 256, unit: 'grapheme' })
  // biome-ignore lint/suspicious/noControlCharactersInRegex: what step() refuses
  .filter((s) => !/[\x00-\x1f\x7f]/.test(s));

/** Claims until the lock the store holds has ended (waits on the store's own clock, not a guess). */
async function claimWhenFree(store: IdempotencyStore, claim: ClaimInput) {
  for (;;) {
    const result = await store.claim(claim);
    if (result.kind !== 'busy') return result;
    await new Promise((resolve) => setTimeout(resolve, Math.max(1, result.lockLeftMs)));
  }
}

export async function storeConformance(name: StoreName): Promise<void> {
  const service = name === 'pg' ? POSTGRES : REDIS;
  describe.runIf(await requireService(service))(`${name}Store`, () => {
    let store: IdempotencyStore;
    let end: () => Promise<void>;
    beforeAll(async () => {
      ({ store, end } = await openStore(name));
    });
    afterAll(() => end());

    it('claims a new key; the same key is then busy, and mismatched with another payload', async () => {
      const first = input();
      const claimed = await store.claim(first);
      expect(claimed).toMatchObject({ kind: 'claimed', secret: first.secret, steps: {}, resumed: false });
      const again = await store.claim({ ...first, token: randomUUID(), secret: randomUUID() });
      expect(again.kind).toBe('busy');
      expect(again.kind === 'busy' && again.lockLeftMs).toBeGreaterThan(25_000);
      expect((await store.claim({ ...first, fingerprint: 'f2' })).kind).toBe('mismatch');
    });

    it('stores the result of the key owner only; later claims get it back, byte for byte', async () => {
      const first = input();
      await store.claim(first);
      expect(await store.complete(first.scope, randomUUID(), response({ status: 500 }))).toBe(false);
      expect(await store.complete(first.scope, first.token, response())).toBe(true);
      expect(await store.complete(first.scope, first.token, response({ status: 500 }))).toBe(false);
      const replay = await store.claim(input({ scope: first.scope }));
      expect(replay).toEqual({ kind: 'completed', response: response() });
      expect((await store.claim(input({ scope: first.scope, fingerprint: 'other' }))).kind).toBe('mismatch');
    });

    it('any body bytes round-trip; a body not stored comes back as such, with its size', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.uint8Array({ maxLength: 2_048 }),
          fc.integer({ min: 100, max: 599 }),
          async (bytes, status) => {
            const claim = input();
            await store.claim(claim);
            const body = Buffer.from(bytes);
            await store.complete(claim.scope, claim.token, response({ status, body, bodyBytes: body.length }));
            const replay = await store.claim(input({ scope: claim.scope }));
            expect(replay.kind === 'completed' && replay.response.body?.equals(body)).toBe(true);
            expect(replay.kind === 'completed' && replay.response.status).toBe(status);
          },
        ),
        { numRuns: 40 },
      );
      const claim = input();
      await store.claim(claim);
      await store.complete(claim.scope, claim.token, response({ body: undefined, bodyBytes: 1_000_000 }));
      expect(await store.claim(input({ scope: claim.scope }))).toMatchObject({
        kind: 'completed',
        response: { body: undefined, bodyBytes: 1_000_000 },
      });
    });

    it('a lock that ended is taken over with its secret and steps; the old owner can no longer write', async () => {
      const first = input({ lockMs: 60 });
      await store.claim(first);
      expect(await store.saveStep(first.scope, first.token, 'charge', '{"v":{"id":"ch_1"}}')).toBe(true);
      const second = input({ scope: first.scope, secret: randomUUID() });
      const takeover = await claimWhenFree(store, second);
      expect(takeover).toEqual({
        kind: 'claimed',
        secret: first.secret,
        steps: { charge: '{"v":{"id":"ch_1"}}' },
        resumed: true,
      });
      // The first owner, late: its step and its result do not count; the new owner's do.
      expect(await store.saveStep(first.scope, first.token, 'mail', '{"v":1}')).toBe(false);
      expect(await store.complete(first.scope, first.token, response({ status: 500 }))).toBe(false);
      expect(await store.complete(first.scope, second.token, response())).toBe(true);
      expect(await store.claim(input({ scope: first.scope }))).toEqual({ kind: 'completed', response: response() });
    });

    it('a released key is taken over at once; release by another token changes nothing', async () => {
      const first = input();
      await store.claim(first);
      await store.release(first.scope, randomUUID());
      expect((await store.claim(input({ scope: first.scope }))).kind).toBe('busy');
      await store.release(first.scope, first.token);
      expect(await store.claim(input({ scope: first.scope }))).toMatchObject({ kind: 'claimed', resumed: true });
    });

    it('of 100 claims racing for one key, exactly one wins', async () => {
      const scope = randomUUID();
      const results = await Promise.all(Array.from({ length: 100 }, () => store.claim(input({ scope }))));
      expect(results.filter((r) => r.kind === 'claimed')).toHaveLength(1);
      expect(results.filter((r) => r.kind === 'busy')).toHaveLength(99);
    });

    it('a record past its time to live is gone: the key starts afresh', async () => {
      const first = input({ ttlMs: 50 });
      await store.claim(first);
      await store.complete(first.scope, first.token, response());
      let again = await store.claim(input({ scope: first.scope, ttlMs: 50, secret: 'fresh' }));
      while (again.kind === 'completed') {
        await new Promise((resolve) => setTimeout(resolve, 10));
        again = await store.claim(input({ scope: first.scope, ttlMs: 50, secret: 'fresh' }));
      }
      expect(again).toMatchObject({ kind: 'claimed', secret: 'fresh', resumed: false, steps: {} });
    });

    it('step names and results of any text round-trip', async () => {
      await fc.assert(
        // Step names as step() accepts them: no control characters, at most 256.
        fc.asyncProperty(stepNames, fc.string({ unit: 'binary' }), async (stepName, result) => {
          const claim = input({ scope: randomBytes(8).toString('hex') });
          await store.claim(claim);
          expect(await store.saveStep(claim.scope, claim.token, stepName, JSON.stringify({ v: result }))).toBe(true);
          await store.release(claim.scope, claim.token);
          const takeover = await store.claim(input({ scope: claim.scope }));
          expect(takeover.kind === 'claimed' && takeover.steps[stepName]).toBe(JSON.stringify({ v: result }));
        }),
        // Names an object's prototype answers to: stored as steps of their own, never as the prototype.
        {
          numRuns: 40,
          examples: [
            ['__proto__', ''],
            ['constructor', 'x'],
            ['toString', ''],
          ],
        },
      );
    });
  });
}
