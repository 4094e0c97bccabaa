/**
 * Nothing lost or duplicated when the server process restarts between attempts: the records live in the store,
 * so a new process replays a finished request, and takes over one whose process died after its charge (once the
 * dead one's lock has run out, at its deadline plus the grace) without charging again.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, REDIS, requireService } from '../../../test/support/services.js';
import type { StoreName } from './harness.js';
import { send } from './harness.js';

const fixture = fileURLToPath(new URL('./fixtures/orders-process.mjs', import.meta.url));
const sourceHooks = fileURLToPath(new URL('../../../test/support/source-hooks.mjs', import.meta.url));
const available = (await requireService(POSTGRES)) && (await requireService(REDIS));

/**
 * The budget of the request whose process dies after its charge: the charge (a claim, an INSERT, its record) takes
 * a few ms alone, and took hundreds with both cores busy; 2 s see it done before the crash, as the test means,
 * rather than cut before it. The retry then waits that long plus the 1 s grace for the dead one's lock.
 */
const DYING_BUDGET_MS = 2_000;

describe.runIf(available).each(['pg', 'redis'] as StoreName[])('a restart between attempts, %s store', (storeName) => {
  const unique = `${storeName}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  const charges = `deadline_idem_charges_${unique}`;
  const env = {
    ...process.env,
    IDEM_STORE: storeName,
    IDEM_PG_URL: POSTGRES.url,
    IDEM_REDIS_URL: REDIS.url,
    IDEM_TABLE: `deadline_idem_${unique}`,
    IDEM_PREFIX: `deadline:idem:${unique}:`,
    IDEM_CHARGES: charges,
  };
  const monitor = new pg.Pool({ connectionString: POSTGRES.url, max: 1 });
  const children: ChildProcess[] = [];

  async function startProcess(): Promise<{ url: string; child: ChildProcess }> {
    const child = spawn(process.execPath, ['--conditions=@deadline/source', '--import', sourceHooks, fixture], {
      env,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(child);
    const lines = createInterface({ input: child.stdout as NonNullable<typeof child.stdout> });
    const [line] = (await Promise.race([
      once(lines, 'line'),
      once(child, 'exit').then(([code]) => {
        throw new Error(`the orders process exited (${code}) before listening`);
      }),
    ])) as [string];
    return { url: `http://127.0.0.1:${JSON.parse(line).port}`, child };
  }

  async function stop(child: ChildProcess, signal: NodeJS.Signals = 'SIGKILL') {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill(signal);
    await exited;
  }

  const chargesFor = async (key: string) =>
    Number((await monitor.query(`SELECT count(*) AS n FROM ${charges} WHERE key = $1`, [key])).rows[0].n);

  beforeAll(async () => {
    await monitor.query(`CREATE TABLE ${charges} (id serial PRIMARY KEY, key text NOT NULL)`);
  });
  afterAll(async () => {
    await Promise.all(children.map((child) => stop(child)));
    await monitor.query(`DROP TABLE IF EXISTS ${charges}`);
    await monitor.query(`DROP TABLE IF EXISTS ${env.IDEM_TABLE}`);
    await monitor.end();
  });

  // 90 s: it starts two processes that load the packages from their TypeScript sources (compiled as they are imported:
  // seconds each with both cores busy; 33 s for the test was seen), and waits out a dead request's lock.
  it('a finished request is replayed by the next process; one that died after its charge is resumed, not charged again', async () => {
    const first = await startProcess();
    const done = await send(first.url, { key: 'k-done', body: { amount: 3 } });
    expect(done.status).toBe(201);
    // The process dies after its charge, before answering (its client sees the connection drop).
    const died = await send(first.url, {
      key: 'k-died',
      body: { amount: 4 },
      budgetMs: DYING_BUDGET_MS,
      headers: { 'x-crash': 'after-charge' },
    }).catch((error: unknown) => error);
    expect(died).toBeInstanceOf(Error);
    await stop(first.child);

    const second = await startProcess();
    const replay = await send(second.url, { key: 'k-done', body: { amount: 3 } });
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(done.body);
    // The dead request's lock ends at its deadline (DYING_BUDGET_MS) plus the grace (1 s): the retry waits for it,
    // then resumes after the recorded charge.
    const resumed = await send(second.url, { key: 'k-died', body: { amount: 4 }, budgetMs: 10_000 });
    expect(resumed.status).toBe(201);
    expect(resumed.body.charge.pid).toBe(first.child.pid);
    expect(resumed.body.answeredBy).toBe(second.child.pid);
    expect(await chargesFor('k-done')).toBe(1);
    expect(await chargesFor('k-died')).toBe(1);
    await stop(second.child, 'SIGTERM');
  }, 90_000);
});
