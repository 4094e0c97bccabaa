/**
 * Benchmarks are not tests: this only checks that `npm run bench` (and `npm run bench:overload` alone) runs in its
 * quick mode and reports every row. The figures themselves come from full runs.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const main = fileURLToPath(new URL('../dist/main.js', import.meta.url));

it('the benchmark runs in quick mode and writes a report with every row', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-bench-'));
  try {
    await promisify(execFile)(process.execPath, [main, '--quick'], { cwd: dir, timeout: 280_000 });
    const report = JSON.parse(await readFile(join(dir, 'bench-report.json'), 'utf8'));
    expect(report.machine.node).toBe(process.version);
    expect(report.overhead.map((row: { variant: string }) => row.variant)).toEqual([
      'fastify',
      'fastify + @deadline/fastify',
      'fastify + @fastify/request-context',
      'fastify + als.run only',
      'fastify + OpenTelemetry',
      'fastify + OpenTelemetry + @deadline/fastify',
      'express',
      'express + @deadline/express',
      'express + als.run only',
    ]);
    expect(report.fetchOverhead.map((row: { variant: string }) => row.variant)).toEqual([
      'fetch, bare Agent (in a deadline context)',
      'fetch + DeadlineDispatcher',
      'fetch + deadlineInterceptor',
      'fetch + an interceptor that does nothing',
      'fetch, bare Agent (no context)',
      'fetch + DeadlineDispatcher (no context)',
    ]);
    for (const row of [...report.overhead, ...report.fetchOverhead]) {
      expect(row.requestsPerSecond).toBeGreaterThan(0);
      expect(row.ratio).toBeGreaterThan(0);
    }
    expect(report.rpcOverhead.map((row: { variant: string }) => row.variant)).toEqual([
      'grpc-js, bare',
      'grpc-js + @deadline/grpc (client and server)',
      'grpc-js + @deadline/grpc (client only)',
      'grpc-js + @deadline/grpc (server only)',
      'Connect (gRPC over HTTP/2), bare',
      'Connect (gRPC over HTTP/2) + @deadline/connect (client and server)',
      'Connect (gRPC over HTTP/2) + @deadline/connect (client only)',
      'Connect (gRPC over HTTP/2) + @deadline/connect (server only)',
    ]);
    for (const row of report.rpcOverhead) {
      expect(row.callsPerSecond).toBeGreaterThan(0);
      expect(row.cpuRatio).toBeGreaterThan(0);
    }
    // The other benchmarks ran and reported their rows (figures are for full runs, not checked here).
    expect(report.precision.expiry.rows.length).toBeGreaterThan(0);
    // Beside the figures, what else went on while they were taken (the client's own event-loop delay…).
    expect(report.precision.expiry.conditions.eventLoopDelay.p99).toBeGreaterThanOrEqual(0);
    expect(report.precision.expiry.conditions.server).toMatch(/^own process/);
    const { rows, floor, neverEarlyFloor } = report.precision.expiry;
    expect(neverEarlyFloor).toHaveLength(rows.length);
    for (const row of [...rows, ...floor, ...neverEarlyFloor]) {
      expect(row.late).toBeGreaterThanOrEqual(Math.max(row.lateDuringGc, row.lateDuringStall));
      expect(row.undisturbed.n).toBeLessThanOrEqual(row.n);
    }
    expect(report.precision.hops.perHop).toHaveLength(2);
    expect(report.cancel.rows.map((row: { name: string }) => row.name)).toHaveLength(4);
    expect(report.overload.skipped === null ? report.overload.variants.length : 4).toBe(4);
    expect(report.memory.requests).toBeGreaterThan(0);
    expect(await readFile(join(dir, 'bench-chart.svg'), 'utf8')).toMatch(/^<svg/);
    // The run's time, per benchmark and in all (a full run must fit in 10 minutes).
    expect(report.seconds.total).toBeGreaterThan(0);
    expect(Object.keys(report.seconds)).toEqual(
      expect.arrayContaining(['overhead', 'fetchOverhead', 'precision', 'cancel', 'overload', 'memory', 'total']),
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}, 300_000);

const overloadMain = fileURLToPath(new URL('../dist/overload-main.js', import.meta.url));

it('the overload benchmark runs alone with its stock query on MariaDB, in quick mode', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-overload-'));
  try {
    await promisify(execFile)(process.execPath, [overloadMain, '--database', 'mariadb', '--quick'], {
      cwd: dir,
      timeout: 120_000,
    });
    const report = JSON.parse(await readFile(join(dir, 'overload-report.json'), 'utf8'));
    expect(report.skipped).toBeNull();
    expect(report.setup.stockDatabase).toBe('mariadb');
    expect(report.setup.mariadb).toMatch(/^(MariaDB|MySQL) \S+ at /);
    expect(report.variants.map((v: { variant: string }) => v.variant)).toEqual(['library', 'baseline']);
    for (const variant of report.variants) {
      // inventory's stock statements were timed on MariaDB: the database side of the level is not empty.
      expect(variant.levels[0].database.statements).toBeGreaterThan(0);
      expect(variant.levels[0].mariadbCpu).not.toBeNull();
    }
    expect(await readFile(join(dir, 'overload-chart.svg'), 'utf8')).toMatch(/^<svg/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}, 150_000);

it('the overload benchmark runs its CPU-bound chain, four variants, in quick mode', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-overload-cpu-'));
  try {
    await promisify(execFile)(process.execPath, [overloadMain, '--bottleneck', 'cpu', '--quick'], {
      cwd: dir,
      timeout: 120_000,
    });
    const report = JSON.parse(await readFile(join(dir, 'overload-cpu-report.json'), 'utf8'));
    expect(report.skipped).toBeNull();
    expect(report.setup.bottleneck).toBe('cpu');
    expect(report.setup.cpuMsPerHop).toBeGreaterThan(0);
    expect(report.setup.budgetMix.map((b: { ms: number }) => b.ms)).toEqual([1000, 500, 250]);
    expect(report.variants.map((v: { variant: string }) => v.variant)).toEqual([
      'library',
      'library+admission',
      'library+under-pressure',
      'baseline',
    ]);
    for (const variant of report.variants) {
      const [level] = variant.levels;
      expect(level.refusedShare).toBeGreaterThanOrEqual(0);
      expect(Object.keys(level.refusedAt)).toEqual(['gateway', 'orders', 'inventory']);
      expect(level.databaseCpu).not.toBeNull();
      // Every hop's handlers did their CPU work, and it was attributed to requests and shipped to the runner —
      // unless all of the level was refused (under-pressure or admission may, on a loaded machine).
      if (level.refused < level.sent) expect(level.handlerCpu.busyMs).toBeGreaterThan(0);
    }
    expect(report.goals.cpu).not.toBeNull();
    expect(report.goals.admissionCost).not.toBeNull();
    const chart = await readFile(join(dir, 'overload-cpu-chart.svg'), 'utf8');
    expect(chart).toMatch(/^<svg/);
    for (const label of [
      'fixed timeouts only',
      'with the library',
      'library + under-pressure',
      'library with admission',
    ]) {
      expect(chart).toContain(`goodput, ${label}`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}, 150_000);

it('the overload benchmark runs across RabbitMQ, in quick mode', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-overload-broker-'));
  try {
    await promisify(execFile)(process.execPath, [overloadMain, '--broker', 'rabbitmq', '--quick'], {
      cwd: dir,
      timeout: 120_000,
    });
    const report = JSON.parse(await readFile(join(dir, 'broker-overload-report.json'), 'utf8'));
    expect(report.skipped).toBeNull();
    expect(report.setup.rabbitmq).toMatch(/RabbitMQ \S+/);
    expect(report.capacity).toBeGreaterThan(0);
    expect(report.levels.map((l: { variant: string }) => l.variant)).toEqual(['library', 'plain']);
    // The consumer's statements were timed: the database side of the level is not empty.
    for (const level of report.levels) expect(level.statementSeconds).toBeGreaterThan(0);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}, 150_000);

it('bench:overload names a bad argument and exits 2', async () => {
  const failed = await promisify(execFile)(process.execPath, [overloadMain, '--database', 'oracle']).catch(
    (error: { code?: number; stderr?: string }) => error,
  );
  expect(failed).toMatchObject({ code: 2 });
  expect((failed as { stderr: string }).stderr).toMatch(/--database takes postgres or mariadb, not oracle/);
});

it('bench:overload names a bad bottleneck or variant and exits 2', async () => {
  for (const [args, said] of [
    [['--bottleneck', 'disk'], /--bottleneck takes pool or cpu, not disk/],
    [['--variants', 'library,retries'], /--variants takes .*, not retries/],
    [['--variants', 'baseline'], /--variants must include library/],
  ] as const) {
    const failed = await promisify(execFile)(process.execPath, [overloadMain, ...args]).catch(
      (error: { code?: number; stderr?: string }) => error,
    );
    expect(failed).toMatchObject({ code: 2 });
    expect((failed as { stderr: string }).stderr).toMatch(said);
  }
});
