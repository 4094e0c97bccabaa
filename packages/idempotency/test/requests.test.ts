/**
 * The middleware on real servers (fastify and express) over real stores (PostgreSQL and Redis): one execution per
 * key, replays, payload checks, duplicates in flight, locks that follow the deadline, recovery steps, bad input
 * and a store that is down.
 */
import { request as httpRequest } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { currentSignal } from '@deadline/core';
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, REDIS, requireService } from '../../../test/support/services.js';
import { IdempotencyProblem, type IdempotencyStore, pgStore, step } from '../src/index.js';
import { MAX_KEY_LENGTH } from '../src/key-header.js';
import {
  type App,
  deferred,
  type Handler,
  type Host,
  openStore,
  type StoreName,
  send,
  startApp,
  watched,
} from './harness.js';

const available = (await requireService(POSTGRES)) && (await requireService(REDIS));

/**
 * The budget of a first attempt that must be cut after its step has started: its claim and the step's start take a
 * few ms alone, and a few hundred with both cores busy (300 ms, as this was, cut some attempts before their step);
 * 1 s sees them started, and the attempt cut in the wait that follows.
 */
const CUT_AFTER_STEP_MS = 1_000;
let keyNumber = 0;
const newKey = () => `key-${process.pid}-${++keyNumber}-${Math.random().toString(36).slice(2)}`;

const combos: [StoreName, Host][] = [
  ['pg', 'fastify'],
  ['pg', 'express'],
  ['redis', 'fastify'],
  ['redis', 'express'],
  ['node-redis', 'fastify'],
];

describe.runIf(available).each(combos)('%s store, %s', (storeName, host) => {
  let store: IdempotencyStore;
  let end: () => Promise<void>;
  const apps: App[] = [];
  beforeAll(async () => {
    ({ store, end } = await openStore(storeName));
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    await end();
  });
  const start = async (handler: Handler, options: Record<string, unknown> = {}, appOptions = {}) => {
    const app = await startApp(host, { store, ...options }, handler, appOptions);
    apps.push(app);
    return app.url;
  };

  it('runs once; a retry gets the stored answer, marked as a replay', async () => {
    let runs = 0;
    const url = await start(async (body) => ({ status: 201, body: { run: ++runs, got: body } }));
    const key = newKey();
    const first = await send(url, { key, body: { item: 'book', qty: 2 } });
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    // The same payload with its keys in another order is the same payload.
    const retry = await send(url, { key, body: { qty: 2, item: 'book' } });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.headers.get('content-type')).toMatch(/^application\/json/);
    expect(retry.body).toEqual(first.body);
    expect(runs).toBe(1);
    // Another key, another run; no key, a run each time; PUT is not covered.
    await send(url, { key: newKey(), body: {} });
    await send(url, { body: {} });
    await send(url, { body: {} });
    await send(url, { method: 'PUT', key, body: {} });
    expect(runs).toBe(5);
  });

  it('100 parallel requests with one key: exactly one execution, 99 replays of its answer', async () => {
    let runs = 0;
    const url = await start(async () => {
      runs++;
      await new Promise((resolve) => setTimeout(resolve, 50));
      return { status: 201, body: { id: runs } };
    });
    const key = newKey();
    const answers = await Promise.all(Array.from({ length: 100 }, () => send(url, { key, body: { a: 1 } })));
    expect(runs).toBe(1);
    expect(answers.map((a) => a.status)).toEqual(Array(100).fill(201));
    expect(answers.filter((a) => a.headers.get('idempotent-replayed') === 'true')).toHaveLength(99);
    for (const answer of answers) expect(answer.body).toEqual({ id: 1 });
  });

  it('the same key with another payload: 422 problem+json, nothing run', async () => {
    let runs = 0;
    const url = await start(async () => ({ status: 201, body: { run: ++runs } }));
    const key = newKey();
    await send(url, { key, body: { amount: 10 } });
    const other = await send(url, { key, body: { amount: 11 } });
    expect(other.status).toBe(422);
    expect(other.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(other.body).toMatchObject({ type: IdempotencyProblem.Reused, status: 422 });
    expect(runs).toBe(1);
  });

  it('a missing key where required, a key too long, two keys: 400 problem+json, nothing run', async () => {
    let runs = 0;
    const url = await start(async () => ({ status: 201, body: { run: ++runs } }), { required: true });
    const missing = await send(url, { body: {} });
    expect(missing.status).toBe(400);
    expect(missing.body).toMatchObject({ type: IdempotencyProblem.Missing });
    const long = await send(url, { key: 'k'.repeat(MAX_KEY_LENGTH + 1), body: {} });
    expect(long.status).toBe(400);
    expect(long.body).toMatchObject({ type: IdempotencyProblem.Invalid });
    const two = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(`${url}/orders`, {
        method: 'POST',
        // Raw headers: node:http then adds neither Host (which the server requires) nor Content-Length.
        headers: ['host', 'localhost', 'content-type', 'application/json', 'content-length', '2'].concat([
          'idempotency-key',
          'a',
          'idempotency-key',
          'b',
        ]),
      });
      req.on('response', (res) => {
        let body = '';
        res.on('data', (chunk) => {
          body += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      req.end('{}');
    });
    expect(two.status).toBe(400);
    expect(JSON.parse(two.body)).toMatchObject({ type: IdempotencyProblem.Invalid });
    expect((await send(url, { key: `"${newKey()}"`, body: {} })).status).toBe(201);
    expect(runs).toBe(1);
  });

  it('a duplicate in flight waits and gets the first answer; one whose budget ends first gets 409 with Retry-After', async () => {
    const busy: (() => void)[] = [];
    const watchedStore = watched(store, () => busy.shift()?.());
    const started = deferred();
    const finish = deferred();
    let runs = 0;
    const app = await startApp(host, { store: watchedStore }, async () => {
      runs++;
      started.resolve();
      await finish.promise;
      return { status: 201, body: { id: 'first' } };
    });
    apps.push(app);
    const key = newKey();
    const first = send(app.url, { key, body: {}, budgetMs: 10_000 });
    await started.promise;
    // A duplicate with 1 s: gives up before its deadline with 409 and when to come back (the first is held until
    // later: a duplicate that waited for it would get no answer at all before its 10 s). A second, not 300 ms as it
    // was: time to reach the store and find the key busy however slow the machine, rather than the deadline's 504.
    const sentAt = performance.now();
    const impatient = await send(app.url, { key, body: {}, budgetMs: 1_000 });
    expect(impatient.status).toBe(409);
    expect(performance.now() - sentAt).toBeLessThan(5_000);
    expect(Number(impatient.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(impatient.body).toMatchObject({ type: IdempotencyProblem.InUse });
    // A duplicate with time to wait: seen waiting, then answered with the first one's answer.
    const waiting = deferred();
    busy.push(() => waiting.resolve());
    const patient = send(app.url, { key, body: {}, budgetMs: 10_000 });
    await waiting.promise;
    finish.resolve();
    expect((await first).body).toEqual({ id: 'first' });
    const replay = await patient;
    expect(replay.status).toBe(201);
    expect(replay.body).toEqual({ id: 'first' });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(runs).toBe(1);
  });

  it("onBusy: 'reject' answers a duplicate in flight with 409 at once", async () => {
    const started = deferred();
    const finish = deferred();
    const url = await start(
      async () => {
        started.resolve();
        await finish.promise;
        return { status: 201, body: {} };
      },
      { onBusy: 'reject' },
    );
    const key = newKey();
    const first = send(url, { key, body: {} });
    await started.promise;
    const sentAt = performance.now();
    const duplicate = await send(url, { key, body: {}, budgetMs: 10_000 });
    expect(duplicate.status).toBe(409);
    // At once, not after waiting: one that waited would answer its 409 only at its 10 s deadline.
    expect(performance.now() - sentAt).toBeLessThan(5_000);
    finish.resolve();
    expect((await first).status).toBe(201);
  });

  it('timed out after its charge, then retried: the charge happens once, and the retry answers with it', async () => {
    let charges = 0;
    let attempts = 0;
    const url = await start(async () => {
      const attempt = ++attempts;
      const charge = await step('charge', async () => ({ id: `ch_${++charges}` }));
      // The first attempt is slow after its charge: cut when its deadline passes (the sleep stands for any work
      // that honours the request's signal).
      if (attempt === 1) await sleep(10_000, undefined, { signal: currentSignal() });
      return { status: 201, body: { charge: charge.id, attempt } };
    });
    const key = newKey();
    const first = await send(url, { key, body: { amount: 5 }, budgetMs: CUT_AFTER_STEP_MS });
    expect(first.status).toBe(504);
    // Cut after its charge, as the test means, not before it.
    expect(charges).toBe(1);
    const retry = await send(url, { key, body: { amount: 5 }, budgetMs: 5_000 });
    expect(retry.status).toBe(201);
    expect(retry.body).toEqual({ charge: 'ch_1', attempt: 2 });
    expect(charges).toBe(1);
    const replay = await send(url, { key, body: { amount: 5 } });
    expect(replay.body).toEqual({ charge: 'ch_1', attempt: 2 });
    expect(attempts).toBe(2);
  });

  it('cut while its step was still running: the key passes only once the step is recorded, and a retry does not run it again', async () => {
    // The soak's finding: a charge (an INSERT) still running at the deadline commits a moment after the 504; a
    // retry sent at once used to take the key over before the step's result was recorded, and charged again.
    let charges = 0;
    const stepEnds = deferred();
    // The step ends once the retry has found the key busy: it waits on the first attempt, whose step still runs.
    const app = await startApp(host, { store: watched(store, () => stepEnds.resolve()) }, async () => {
      const charge = await step('charge', async () => {
        const id = `ch_${++charges}`;
        // Does not honour the signal: it finishes when it finishes, as a statement the cancel reached too late.
        if (charges === 1) await stepEnds.promise;
        return { id };
      });
      return { status: 201, body: { charge: charge.id } };
    });
    apps.push(app);
    const key = newKey();
    const first = await send(app.url, { key, body: { amount: 7 }, budgetMs: CUT_AFTER_STEP_MS });
    expect(first.status).toBe(504);
    // Cut while its step runs, as the test means, not before the step began.
    expect(charges).toBe(1);
    // Sent at once, while the first attempt's step is still running; the step ends while the retry waits.
    const answer = await send(app.url, { key, body: { amount: 7 }, budgetMs: 5_000 });
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ charge: 'ch_1' });
    expect(charges).toBe(1);
  });

  it('a request that ran past its lock and lost the key does not overwrite the new owner’s result', async () => {
    const firstGoes = deferred();
    const firstStarted = deferred();
    let runs = 0;
    // No deadline adapter: the lock is `lockMs`, and the first request runs on past it.
    const url = await start(
      async () => {
        const run = ++runs;
        if (run === 1) {
          firstStarted.resolve();
          await firstGoes.promise;
        }
        return { status: 201, body: { run } };
      },
      { lockMs: 100 },
      { deadline: false },
    );
    const key = newKey();
    const first = send(url, { key, body: {} });
    await firstStarted.promise;
    const second = await send(url, { key, body: {} });
    expect(second.body).toEqual({ run: 2 });
    firstGoes.resolve();
    // Its own client still gets what it computed: nobody can take that back.
    expect((await first).body).toEqual({ run: 1 });
    const third = await send(url, { key, body: {} });
    expect(third.body).toEqual({ run: 2 });
    expect(third.headers.get('idempotent-replayed')).toBe('true');
  });

  it('statuses that are not a result give the key back (503); errors that are one are stored (500)', async () => {
    let runs = 0;
    const url = await start(async (body) => ({ status: (body as { status: number }).status, body: { run: ++runs } }));
    const unavailable = newKey();
    expect((await send(url, { key: unavailable, body: { status: 503 } })).status).toBe(503);
    expect((await send(url, { key: unavailable, body: { status: 503 } })).body).toEqual({ run: 2 });
    const failed = newKey();
    expect((await send(url, { key: failed, body: { status: 500 } })).body).toEqual({ run: 3 });
    const replay = await send(url, { key: failed, body: { status: 500 } });
    expect(replay.status).toBe(500);
    expect(replay.body).toEqual({ run: 3 });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
  });

  it('a body over the cap is not stored whole: its replay says so, never a cut answer', async () => {
    const url = await start(async () => ({ status: 201, body: { text: 'x'.repeat(500) } }), { maxBodyBytes: 100 });
    const key = newKey();
    const first = await send(url, { key, body: {} });
    expect(first.body.text).toHaveLength(500);
    const replay = await send(url, { key, body: {} });
    expect(replay.status).toBe(201);
    expect(replay.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    const sentBytes = Buffer.byteLength(JSON.stringify(first.body));
    expect(replay.body).toMatchObject({ type: IdempotencyProblem.BodyNotStored, bodyBytes: sentBytes });
  });

  it('fuzzed keys and bodies: a valid key runs once and replays the same; anything else is a 400, never a crash', async () => {
    let runs = 0;
    const url = await start(async (body) => ({ status: 201, body: { run: ++runs, body } }));
    const printable = fc.string({
      minLength: 1,
      maxLength: 300,
      unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
    });
    await fc.assert(
      fc.asyncProperty(printable, fc.jsonValue({ maxDepth: 3 }), async (raw, value) => {
        const key = `${newKey()}${raw}`.slice(0, raw.length > MAX_KEY_LENGTH ? raw.length + 20 : MAX_KEY_LENGTH);
        const body = { value };
        const runsBefore = runs;
        const first = await send(url, { key, body });
        if (key.length > MAX_KEY_LENGTH || key.startsWith('"')) {
          expect([400, 201]).toContain(first.status);
          return;
        }
        if (host === 'fastify' && fastifyRefusesBody(body)) {
          // fastify's own JSON parser refuses prototype-poisoning bodies (onProtoPoisoning and
          // onConstructorPoisoning default to 'error') before any hook runs: nothing is claimed or run.
          expect(first.status).toBe(400);
          expect(first.body).toMatchObject({ code: 'FST_ERR_CTP_INVALID_JSON_BODY' });
          expect(runs).toBe(runsBefore);
          return;
        }
        expect(first.status).toBe(201);
        const again = await send(url, { key, body });
        expect(again.headers.get('idempotent-replayed')).toBe('true');
        expect(again.body).toEqual(first.body);
      }),
      {
        numRuns: 25,
        // Names that are also Object.prototype's, always tried: express hands them to the payload check.
        examples: [
          ['!', JSON.parse('{"__proto__":0}')],
          ['!', JSON.parse('{"constructor":{"prototype":1}}')],
          ['!', JSON.parse('{"toString":"x","constructor":1}')],
        ],
      },
    );
  });
});

/** Whether fastify's default JSON parser refuses this body: a `__proto__` key, or `constructor.prototype`. */
function fastifyRefusesBody(value: unknown): boolean {
  if (value === null || typeof value !== 'object') return false;
  const entries = Object.entries(value);
  if (Object.hasOwn(value, '__proto__')) return true;
  const ctor = Object.hasOwn(value, 'constructor') ? (value as { constructor: unknown }).constructor : undefined;
  if (ctor !== null && typeof ctor === 'object' && Object.hasOwn(ctor, 'prototype')) return true;
  return entries.some(([, inner]) => fastifyRefusesBody(inner));
}

describe.runIf(available).each(['fastify', 'express'] as Host[])('a store that cannot be reached, %s', (host) => {
  const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', connectionTimeoutMillis: 500 });
  const apps: App[] = [];
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    await pool.end();
  });

  it('fails closed with 503 by default; with failOpen the request runs', async () => {
    let runs = 0;
    const handler: Handler = async () => ({ status: 201, body: { run: ++runs } });
    const closed = await startApp(host, { store: pgStore(pool) }, handler);
    apps.push(closed);
    const refused = await send(closed.url, { key: newKey(), body: {} });
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({ type: IdempotencyProblem.StoreUnavailable });
    expect(runs).toBe(0);
    const open = await startApp(host, { store: pgStore(pool), failOpen: true }, handler);
    apps.push(open);
    expect((await send(open.url, { key: newKey(), body: {} })).status).toBe(201);
    expect(runs).toBe(1);
  });
});
