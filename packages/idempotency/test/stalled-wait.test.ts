/**
 * A duplicate waiting on a busy key, when the event loop stalls past its deadline: the 409 it was due still goes
 * out, not the deadline's 504 (CI, Node 22: a loaded machine stalled a 300 ms duplicate's last 25 ms, and it got
 * 504).
 *
 * Its own file, so that no other request's deadline, left by another test in this process, comes due during the
 * stall: the expiry queue would then run first and, finding this one past too, stop it with its 504. That is the
 * limit of the fix — a stall past the deadline that another deadline wakes from first ends in the deadline's
 * 504, which is true too.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, REDIS, requireService } from '../../../test/support/services.js';
import { IdempotencyProblem, type IdempotencyStore } from '../src/index.js';
import { type App, deferred, type Host, openStore, type StoreName, send, startApp } from './harness.js';

const available = (await requireService(POSTGRES)) && (await requireService(REDIS));
let keyNumber = 0;
const newKey = () => `stalled-${process.pid}-${++keyNumber}-${Math.random().toString(36).slice(2)}`;

/** `store`, which blocks the event loop for `ms` (right after the turn) the first time a claim finds the key busy. */
function stallingOnBusy(store: IdempotencyStore, ms: number): IdempotencyStore {
  let stalled = false;
  return {
    ...store,
    claim: async (input) => {
      const claim = await store.claim(input);
      if (claim.kind === 'busy' && !stalled) {
        stalled = true;
        // After this turn: the duplicate has armed the timer of its wait by then.
        setImmediate(() => {
          const until = performance.now() + ms;
          while (performance.now() < until) {}
        });
      }
      return claim;
    },
    complete: (...args) => store.complete(...args),
    saveStep: (...args) => store.saveStep(...args),
    release: (...args) => store.release(...args),
  };
}

const combos: [StoreName, Host][] = [
  ['pg', 'fastify'],
  ['pg', 'express'],
  ['redis', 'fastify'],
  ['redis', 'express'],
];

describe.runIf(available).each(combos)('%s store, %s', (storeName, host) => {
  let store: IdempotencyStore;
  let end: () => Promise<void>;
  let app: App | undefined;
  beforeAll(async () => {
    ({ store, end } = await openStore(storeName));
  });
  afterAll(async () => {
    await app?.close();
    await end();
  });

  it('a duplicate whose wait ends in a stall past its deadline gets 409, not 504', async () => {
    const started = deferred();
    const finish = deferred();
    // 400 ms: past the duplicate's 300 ms budget; its wait's timer and its deadline come due in the same turn.
    app = await startApp(host, { store: stallingOnBusy(store, 400) }, async () => {
      started.resolve();
      await finish.promise;
      return { status: 201, body: {} };
    });
    const key = newKey();
    const first = send(app.url, { key, body: {}, budgetMs: 10_000 });
    await started.promise;
    const duplicate = await send(app.url, { key, body: {}, budgetMs: 300 });
    finish.resolve();
    expect((await first).status).toBe(201);
    expect(duplicate.status).toBe(409);
    expect(duplicate.body).toMatchObject({ type: IdempotencyProblem.InUse });
  });
});
