/**
 * The verdict on made-up runs: a clean one passes; each kind of damage the soak looks for fails its own check and
 * only that one — a leak, a lost or repeated job, a double charge, a pool left dirty, a slow recovery.
 */
import { describe, expect, it } from 'vitest';
import type { ServiceSample, SoakResult } from '../src/soak.ts';
import type { SoakRecord } from '../src/soak-load.ts';
import { judge } from '../src/verdict.ts';

const MINUTES = 5;
const DURATION = MINUTES * 60_000;

function samples(grow: (at: number) => Partial<ServiceSample> = () => ({})): ServiceSample[] {
  return Array.from({ length: DURATION / 10_000 + 1 }, (_, i) => ({
    at: i * 10_000,
    rssBytes: 80e6,
    youngBytes: 16e6,
    heapBytes: 20e6,
    resources: { TCPSocketWrap: 10, Timeout: 4 },
    abortListeners: 1,
    ...grow(i * 10_000),
  }));
}

/** 100 requests a second, all answered in 20 ms, except none answered during each fault. */
function records(faults: { startedAt: number; clearedAt: number }[], slowAfter = 0): SoakRecord[] {
  const out: SoakRecord[] = [];
  for (let t = 0; t < DURATION; t += 10) {
    const down = faults.some((f) => t >= f.startedAt && t < f.clearedAt + slowAfter);
    out.push({
      kind: 'read',
      budgetMs: 1_000,
      sentAt: t,
      doneAt: t + 20,
      ok: !down,
      enoughBudget: true,
      status: down ? 503 : 200,
      circuitOpen: false,
    });
  }
  return out;
}

function cleanRun(): SoakResult {
  const faults = [
    { kind: 'postgres-restart' as const, startedAt: 45_000, clearedAt: 46_000, detail: '' },
    { kind: 'slow-drip' as const, startedAt: 150_000, clearedAt: 160_000, detail: '' },
  ];
  const pool = { total: 10, idle: 10, waiting: 0, settings: { connections: 10, altered: [] } };
  return {
    durationMs: DURATION,
    rate: 100,
    capacity: undefined,
    records: records(faults),
    charges: [{ key: 'k1', order: 1, attempts: 2, statuses: [504, 201], chargeIds: [7] }],
    faults,
    samples: { gateway: samples(), orders: samples(), inventory: samples(), worker: samples() },
    finish: {
      orders: { pools: [{ name: 'postgres', ...pool }], drain: { completed: 1, pending: [] } },
      inventory: { pools: [{ name: 'mariadb', ...pool }] },
    },
    unhandled: { gateway: [], orders: [], inventory: [], worker: [] },
    jobs: { added: ['1', '2', '3'], processed: { '1': 1, '2': 1 }, queued: ['3'] },
    chargeRows: { 1: 1 },
    breakerCooldownMs: 1_000,
  };
}

const failing = (result: SoakResult) =>
  judge(result)
    .checks.filter((c) => c.pass === false)
    .map((c) => c.name.split(':')[0]?.split(' ')[0]);

describe('judge', () => {
  it('passes a clean run, every check judged', () => {
    const verdict = judge(cleanRun());
    expect(verdict.checks.filter((c) => c.pass !== true)).toEqual([]);
    expect(verdict.pass).toBe(true);
    expect(verdict.recoveries.map((r) => r.recoveryMs)).toEqual([0, 0]);
  });

  it('a heap that grows a little with every minute, and a listener per request: two failures', () => {
    const run = cleanRun();
    run.samples.orders = samples((at) => ({ heapBytes: 20e6 + at * 30 }));
    run.samples.gateway = samples((at) => ({ abortListeners: 1 + at / 10 }));
    expect(failing(run)).toEqual(['memory', 'handles,']);
  });

  it('an uncaught exception in one process, even one during the drain', () => {
    const run = cleanRun();
    run.unhandled.orders = ["uncaught exception: error: terminating connection (an 'error' event on a Client…)"];
    expect(failing(run)).toEqual(['no']);
  });

  it('a job acknowledged and neither processed nor queued, or processed twice', () => {
    const lost = cleanRun();
    lost.jobs.queued = [];
    expect(failing(lost)).toEqual(['every']);
    const twice = cleanRun();
    twice.jobs.processed = { '1': 2, '2': 1 };
    expect(judge(twice).checks.find((c) => c.name.includes('BullMQ'))?.detail).toMatch(/1 more than once/);
  });

  it('a key that charged twice, a pool left with a statement_timeout, a task the drain did not see end', () => {
    const run = cleanRun();
    run.chargeRows = { 1: 2 };
    run.finish.orders.pools[0] = {
      name: 'postgres',
      total: 10,
      idle: 10,
      waiting: 0,
      settings: { connections: 10, altered: ['statement_timeout=12ms'] },
    };
    run.finish.orders.drain = { completed: 0, pending: [{ task: 'audit', traceId: undefined, elapsedMs: 15_000 }] };
    const failed = judge(run)
      .checks.filter((c) => c.pass === false)
      .map((c) => c.name);
    expect(failed).toEqual([
      expect.stringMatching(/^every pool idle/),
      expect.stringMatching(/^every detached task/),
      expect.stringMatching(/^exactly one side effect/),
    ]);
  });

  it('goodput back 3 s after a fault cleared: too slow, unless a breaker opened (2 s + its 1 s cooldown)', () => {
    const run = cleanRun();
    run.records = records(run.faults, 3_000);
    const slow = judge(run).recoveries;
    expect(slow.map((r) => r.recoveryMs)).toEqual([3_000, 3_000]);
    expect(judge(run).pass).toBe(false);
    for (const r of run.records) if (!r.ok) r.circuitOpen = true;
    expect(judge(run).recoveries.every((r) => r.breakerOpened && r.allowedMs === 3_000)).toBe(true);
    expect(judge(run).pass).toBe(true);
  });

  it('a run under four minutes: memory and resources not judged, the rest judged', () => {
    const run = cleanRun();
    run.durationMs = 60_000;
    run.records = run.records.filter((r) => r.sentAt < 60_000);
    run.faults = [{ kind: 'redis-restart', startedAt: 20_000, clearedAt: 21_000, detail: '' }];
    for (const name of ['gateway', 'orders', 'inventory', 'worker'] as const) {
      run.samples[name] = run.samples[name].filter((s) => s.at <= 60_000);
    }
    const verdict = judge(run);
    // The p99 is judged on 1,800 requests before the fault and 3,500 after it; on a quarter of them, not.
    expect(verdict.checks.filter((c) => c.pass === null).length).toBe(2);
    expect(verdict.pass).toBe(true);
    run.records = run.records.filter((r) => r.sentAt % 40 === 0);
    expect(
      judge(run)
        .checks.filter((c) => c.pass === null)
        .map((c) => c.name.split(' ')[0]),
    ).toEqual(['memory:', 'handles,', 'p99']);
  });
});
