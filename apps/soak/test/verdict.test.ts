/**
 * The verdict on made-up runs: a clean one passes; each kind of damage the soak looks for fails its own check and
 * only that one — a leak, a lost or repeated job, a double charge, a pool left dirty, a slow recovery, a service
 * that does not come back; and a short run judges recovery by what a minute can tell.
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

/**
 * 100 reads a second, every other one's stock on MariaDB, all answered in 20 ms, except none answered during each
 * fault (and `slowAfter` ms after it), nor the ones `failing` says.
 */
function records(
  faults: { startedAt: number; clearedAt: number }[],
  slowAfter = 0,
  failing: (r: SoakRecord) => boolean = () => false,
): SoakRecord[] {
  const out: SoakRecord[] = [];
  for (let t = 0; t < DURATION; t += 10) {
    const record: SoakRecord = {
      kind: 'read',
      budgetMs: 1_000,
      sentAt: t,
      doneAt: t + 20,
      ok: true,
      enoughBudget: true,
      status: 200,
      circuitOpen: false,
      db: (t / 10) % 2 === 0 ? 'postgres' : 'mariadb',
    };
    const down = faults.some((f) => t >= f.startedAt && t < f.clearedAt + slowAfter) || failing(record);
    out.push({ ...record, ok: !down, status: down ? 503 : 200 });
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
    // The first read sent once the fault cleared was answered 20 ms later.
    expect(verdict.recoveries.map((r) => r.firstAnswerMs)).toEqual([20, 20]);
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

  it('nothing answered for 2.95 s after a fault cleared: too slow, unless a breaker opened (2 s + its 1 s cooldown)', () => {
    const run = cleanRun();
    run.records = records(run.faults, 2_950);
    const slow = judge(run).recoveries;
    expect(slow.map((r) => r.firstAnswerMs)).toEqual([2_970, 2_970]);
    expect(slow.map((r) => r.recoveryMs)).toEqual([3_000, 3_000]);
    expect(failing(run)).toEqual(['back', 'goodput']);
    for (const r of run.records) if (!r.ok) r.circuitOpen = true;
    for (const r of judge(run).recoveries) {
      // 10 ms: the longest the service went without an answer before the fault.
      expect(r).toMatchObject({ breakerOpened: true, allowedMs: 3_000, waitBeforeMs: 10, firstAnswerAllowedMs: 3_010 });
    }
    expect(judge(run).pass).toBe(true);
  });

  it('the first answer after a fault may take as long beyond 2 s as the service went without one before it', () => {
    const run = cleanRun();
    const back = () => judge(run).checks.find((c) => c.name.startsWith('back'))?.pass;
    run.records = records(run.faults, 2_000);
    expect(judge(run).recoveries.map((r) => [r.firstAnswerMs, r.firstAnswerAllowedMs])).toEqual([
      [2_020, 2_010],
      [2_020, 2_010],
    ]);
    expect(failing(run)).toEqual(['back']);
    // A machine so busy that one read in 80 is answered in time (one every 800 ms), before the faults and after.
    run.records = records(run.faults, 2_000, (r) => (r.sentAt / 10) % 80 !== 0);
    expect(judge(run).recoveries.map((r) => [r.firstAnswerMs, r.waitBeforeMs, r.firstAnswerAllowedMs])).toEqual([
      [2_020, 800, 2_800],
      [2_420, 800, 2_800],
    ]);
    expect(back()).toBe(true);
  });

  it('a fault with no answer in the quiet before it is not judged; a run where no fault could be judged fails', () => {
    const run = cleanRun();
    // The machine too busy for the load from the start until the second fault: nothing answered before the first.
    run.records = records(run.faults, 0, (r) => r.sentAt < 100_000);
    const verdict = judge(run);
    expect(verdict.recoveries.map((r) => [r.firstAnswerAllowedMs, r.allowedMs])).toEqual([
      [null, null],
      [2_010, 2_000],
    ]);
    expect(verdict.checks.find((c) => c.name.startsWith('back'))?.detail).toMatch(
      /^postgres-restart 54\.0 s \(not judged: no read through it answered in time in the quiet before it either\); slow-drip 0\.0 s/,
    );
    expect(verdict.pass).toBe(true);
    run.records = records(run.faults, 0, () => true);
    expect(judge(run).recoveries.every((r) => r.firstAnswerAllowedMs === null && r.allowedMs === null)).toBe(true);
    expect(failing(run)).toEqual(['back', 'goodput']);
  });

  it('a service that answers again but slowly gets back to its level: not back within 2 s in a long run', () => {
    const run = cleanRun();
    // For 3 s after each fault, two reads in three fail (a backlog on a busy machine): answers come at once, the
    // level later.
    const backlog = (r: SoakRecord) =>
      run.faults.some((f) => r.sentAt >= f.clearedAt && r.sentAt < f.clearedAt + 3_000) && (r.sentAt / 10) % 3 !== 0;
    run.records = records(run.faults, 0, backlog);
    const verdict = judge(run);
    expect(verdict.recoveries.map((r) => [r.firstAnswerMs, r.recoveryMs])).toEqual([
      [40, 3_000],
      [40, 3_000],
    ]);
    expect(failing(run)).toEqual(['goodput']);
  });

  it('MariaDB never comes back after the KILL: not back (no MariaDB read answered), and goodput at half its level', () => {
    const run = cleanRun();
    run.faults[1] = { kind: 'mariadb-kill', startedAt: 150_000, clearedAt: 150_200, detail: '' };
    run.records = records(run.faults, 0, (r) => r.db === 'mariadb' && r.sentAt >= 150_000);
    const verdict = judge(run);
    expect(verdict.recoveries[1]).toMatchObject({ kind: 'mariadb-kill', firstAnswerMs: null, recoveryMs: null });
    expect(failing(run)).toEqual(['back', 'goodput']);
  });

  it('a run under four minutes: goodput back to 75 %, held, before the next fault; the first answer within 2 s', () => {
    const run = cleanRun();
    run.durationMs = 60_000;
    run.faults = [
      { kind: 'postgres-restart', startedAt: 9_000, clearedAt: 9_400, detail: '' },
      { kind: 'redis-restart', startedAt: 16_800, clearedAt: 17_200, detail: '' },
    ];
    // Every other read fails for 4 s after each fault (a busy machine's backlog): 50 % of the level, then all of it.
    const backlog = (until: number) => (r: SoakRecord) =>
      run.faults.some((f) => r.sentAt >= f.clearedAt && r.sentAt < f.clearedAt + until) && (r.sentAt / 10) % 2 === 0;
    run.records = records(run.faults, 0, backlog(4_000)).filter((r) => r.sentAt < 60_000);
    const verdict = judge(run);
    const recovery = verdict.checks.find((c) => c.name.startsWith('goodput'));
    expect(recovery?.name).toMatch(/≥ 75 %, held for 1 s, before the next fault/);
    expect(verdict.recoveries.map((r) => [r.firstAnswerMs, r.recoveryMs, r.allowedMs])).toEqual([
      [30, 4_000, 6_400], // the next fault at 16.8 s, less the second it must hold
      [30, 4_000, 41_800], // the load ends at 60 s
    ]);
    expect(recovery?.pass).toBe(true);
    // Still at half its level when the next fault came: not back.
    run.records = records(run.faults, 0, backlog(7_000)).filter((r) => r.sentAt < 60_000);
    // (Back only once the second fault's backlog had gone too, at 24.4 s.)
    expect(judge(run).recoveries[0]).toMatchObject({ recoveryMs: 15_000, allowedMs: 6_400 });
    expect(failing(run)).toEqual(['goodput']);
    // 80 % of the level until the next fault (one read in five failing): back in a short run, not in a long one.
    const fifth = (r: SoakRecord) => r.sentAt >= 9_400 && r.sentAt < 16_800 && (r.sentAt / 10) % 5 === 0;
    run.records = records(run.faults, 0, fifth).filter((r) => r.sentAt < 60_000);
    expect(judge(run).recoveries[0]?.recoveryMs).toBe(0);
    expect(judge(run).pass).toBe(true);
    run.durationMs = DURATION;
    // (At 90 %: only once the next fault had come and gone, at 17.4 s.)
    expect(judge(run).recoveries[0]).toMatchObject({ share: 0.9, recoveryMs: 8_000, allowedMs: 2_000 });
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
