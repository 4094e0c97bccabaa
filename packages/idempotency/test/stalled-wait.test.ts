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
import { remainingMs } from '@deadline/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, REDIS, requireService } from '../../../test/support/services.js';
import { IdempotencyProblem, type IdempotencyStore } from '../src/index.js';
import { type App, deferred, type Host, openStore, type StoreName, send, startApp, watched } from './harness.js';

const available = (await requireService(POSTGRES)) && (await requireService(REDIS));

/**
 * The duplicate's budget: time to get to its busy look however slow the machine (with 300 ms, a loaded one could
 * reach its deadline first and answer the deadline's 504 before the store was even asked).
 */
const DUPLICATE_MS = 1_000;
/** How far past the duplicate's deadline the stall runs (it stalls for what is left of the budget, and this). */
const PAST_THE_DEADLINE_MS = 100;
let keyNumber = 0;
const newKey = () => `stalled-${process.pid}-${++keyNumber}-${Math.random().toString(36).slice(2)}`;

/** Blocks the event loop for `ms`, right after this turn (the duplicate has armed its wait's timer by then). */
function stallAfterThisTurn(ms: number): void {
  setImmediate(() => {
    const until = performance.now() + ms;
    while (performance.now() < until) {}
  });
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
    // The first busy look stalls the loop past the duplicate's deadline (the look runs in its request: what is left of
    // its budget is read there), so that its wait's timer and its deadline come due in the same turn.
    let stalled = false;
    let stalledFor = Number.NaN;
    const stalling = watched(store, () => {
      if (stalled) return;
      stalledFor = remainingMs();
      stalled = true;
      stallAfterThisTurn(Math.min(remainingMs(), DUPLICATE_MS) + PAST_THE_DEADLINE_MS);
    });
    app = await startApp(host, { store: stalling }, async () => {
      started.resolve();
      await finish.promise;
      return { status: 201, body: {} };
    });
    const key = newKey();
    const first = send(app.url, { key, body: {}, budgetMs: 10_000 });
    await started.promise;
    const duplicate = await send(app.url, { key, body: {}, budgetMs: DUPLICATE_MS });
    finish.resolve();
    expect((await first).status).toBe(201);
    // The look ran in the duplicate's request, whose budget it then read.
    expect(stalledFor).toBeLessThanOrEqual(DUPLICATE_MS);
    expect(duplicate.status).toBe(409);
    expect(duplicate.body).toMatchObject({ type: IdempotencyProblem.InUse });
  });
});
