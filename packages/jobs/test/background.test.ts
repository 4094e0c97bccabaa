/**
 * Detached work on a real Fastify server and a real PostgreSQL: it outlives the request that started it (and
 * that request's 504), keeps the request's trace id in its logs, and is drained on shutdown. The same work
 * without the escape is cancelled with the request — the inverse of seed 003's "Background vs ctx" case.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import { Writable } from 'node:stream';
import { runWithDeadline, traceFrom } from '@deadline/core';
import { formatTraceparent } from '@deadline/core/wire';
import fastifyDeadline from '@deadline/fastify';
import { type DeadlinePool, withDeadline } from '@deadline/pg';
import { deadlineMixin } from '@deadline/pino';
import Fastify from 'fastify';
import pg from 'pg';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { Background, closeAndDrain, fastifyBackground, type LoggerLike } from '../src/index.ts';

const available = await requireService(POSTGRES);

/** A pino logger (with the deadline mixin) whose lines land in an array. */
function memoryLogger(): { logger: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino({ mixin: deadlineMixin() }, stream), lines };
}

/** A logger that records calls (for tests that read levels and messages). */
function recordingLogger() {
  const lines: { level: string; fields: Record<string, unknown>; message: string }[] = [];
  const logger: LoggerLike = {
    info: (fields, message) => lines.push({ level: 'info', fields, message }),
    warn: (fields, message) => lines.push({ level: 'warn', fields, message }),
    error: (fields, message) => lines.push({ level: 'error', fields, message }),
  };
  return { logger, lines };
}

const table = `deadline_audit_${process.pid}`;
let pool: pg.Pool;
let db: DeadlinePool<pg.Pool>;

describe.runIf(available)('@deadline/jobs: detached work (PostgreSQL, Fastify)', () => {
  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: POSTGRES.url, max: 30 });
    db = withDeadline(pool);
    await pool.query(`CREATE TABLE IF NOT EXISTS ${table} (trace_id text NOT NULL, kind text NOT NULL)`);
  });
  afterAll(async () => {
    await pool?.query(`DROP TABLE IF EXISTS ${table}`);
    await pool?.end();
  });

  it('a 200 ms request starts a 500 ms audit insert: 504 for the request, the insert lands (100 of 100), logged with its trace id', async () => {
    const { logger, lines } = memoryLogger();
    const tasks = new Background({ logger });
    const app = Fastify({ forceCloseConnections: true });
    await app.register(fastifyDeadline, { serviceName: 'orders' });
    await app.register(fastifyBackground, { background: tasks });
    const insert = (traceId: string, kind: string) =>
      db.query(`INSERT INTO ${table} SELECT $1, $2 FROM pg_sleep(0.5)`, [traceId, kind]);
    app.post('/orders/:traceId', async (req) => {
      const { traceId } = req.params as { traceId: string };
      tasks.run('audit', () => insert(traceId, 'detached'), { budgetMs: 5_000 });
      await db.query('SELECT pg_sleep(2)'); // the request's own work: cut at its deadline
      return 'never';
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const traces: string[] = [];
      const statuses: number[] = [];
      for (let batch = 0; batch < 10; batch++) {
        await Promise.all(
          Array.from({ length: 10 }, async () => {
            const trace = traceFrom();
            traces.push(trace.traceId);
            const response = await request(`${url}/orders/${trace.traceId}`, {
              method: 'POST',
              headers: { 'x-request-deadline': '200', traceparent: formatTraceparent(trace) },
            });
            statuses.push(response.statusCode);
            await response.body.dump();
          }),
        );
      }
      expect(statuses.filter((status) => status === 504)).toHaveLength(100);
      const report = await tasks.drain({ timeoutMs: 20_000 });
      expect(report.pending).toEqual([]);
      const { rows } = await pool.query(`SELECT trace_id FROM ${table} WHERE kind = 'detached'`);
      expect(rows.map((row: { trace_id: string }) => row.trace_id).sort()).toEqual([...traces].sort());
      // One "done" line per task, each with the trace id of the request that started it, marked detached.
      const done = lines.filter((line) => line.msg === 'background task done');
      expect(done).toHaveLength(100);
      for (const line of done) {
        expect(line).toMatchObject({ task: 'audit', detached: true, outcome: 'ok', budgetMs: 5_000 });
        expect(traces).toContain(line.traceId);
        expect(line.detachedFrom).toMatch(/^[0-9a-f]{16}$/);
      }
    } finally {
      await app.close();
    }
  }, 60_000);

  it('the same insert without the escape is cancelled with the request (0 of 20 land)', async () => {
    const app = Fastify({ forceCloseConnections: true });
    await app.register(fastifyDeadline, { serviceName: 'orders' });
    const started: Promise<unknown>[] = [];
    app.post('/orders/:traceId', async (req) => {
      const { traceId } = req.params as { traceId: string };
      // Fire and forget, still inside the request's context: it dies with the request.
      started.push(
        db.query(`INSERT INTO ${table} SELECT $1, 'attached' FROM pg_sleep(0.5)`, [traceId]).catch((e: unknown) => e),
      );
      await db.query('SELECT pg_sleep(2)');
      return 'never';
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const response = await request(`${url}/orders/t${i}`, {
            method: 'POST',
            headers: { 'x-request-deadline': '200' },
          });
          expect(response.statusCode).toBe(504);
          await response.body.dump();
        }),
      );
      const outcomes = await Promise.all(started);
      expect(outcomes.every((outcome) => outcome instanceof Error)).toBe(true);
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${table} WHERE kind = 'attached'`);
      expect(rows[0]).toEqual({ n: 0 });
    } finally {
      await app.close();
    }
  });

  it('a task under its own budget is bounded by it, not by the request: its calls fail at the task budget', async () => {
    const { logger, lines } = recordingLogger();
    const tasks = new Background({ logger });
    const outcome = await runWithDeadline(50, () =>
      tasks.run('slow-audit', () => db.query('SELECT pg_sleep(5)'), { budgetMs: 300 }),
    );
    expect(outcome.outcome).toBe('deadline');
    expect(outcome.elapsedMs).toBeGreaterThanOrEqual(290);
    expect(outcome.elapsedMs).toBeLessThan(2_000);
    expect(lines.at(-1)).toMatchObject({ level: 'error', message: 'background task failed' });
  });
});

describe('@deadline/jobs: drain and failures', () => {
  it('drain() waits for work in flight and for work it starts, then returns', async () => {
    const { logger } = recordingLogger();
    const tasks = new Background({ logger });
    let finished = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    tasks.run('first', async () => {
      await gate;
      tasks.run('second', async () => {
        await new Promise((resolve) => setImmediate(resolve));
        finished++;
      });
      finished++;
    });
    const draining = tasks.drain({ timeoutMs: 5_000 });
    setTimeout(release, 100);
    const report = await draining;
    expect(report).toEqual({ completed: 2, pending: [] });
    expect(finished).toBe(2);
    expect(tasks.size).toBe(0);
  });

  it('work that overruns the drain timeout is logged and reported, not dropped', async () => {
    const { logger, lines } = recordingLogger();
    const tasks = new Background({ logger });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const outcome = runWithDeadline(1_000, () => tasks.run('stuck', () => gate));
    const started = performance.now();
    const report = await tasks.drain({ timeoutMs: 200 });
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(190);
    expect(elapsed).toBeLessThan(1_500);
    expect(report.completed).toBe(0);
    expect(report.pending).toHaveLength(1);
    expect(report.pending[0]).toMatchObject({ task: 'stuck' });
    expect(lines).toContainEqual(
      expect.objectContaining({ level: 'warn', message: 'background task still running at drain timeout' }),
    );
    // Still running, still tracked: it finishes when it finishes.
    release();
    expect(await outcome).toMatchObject({ task: 'stuck', outcome: 'ok' });
  });

  it('a failing task never becomes an unhandled rejection; it is logged with the trace id', async () => {
    const { logger, lines } = recordingLogger();
    const tasks = new Background({ logger });
    const trace = traceFrom();
    const outcome = await runWithDeadline(1_000, async () => {
      const { runWithContext } = await import('@deadline/core');
      return runWithContext({ trace }, () =>
        tasks.run('explode', () => {
          throw new Error('boom');
        }),
      );
    });
    expect(outcome).toMatchObject({ task: 'explode', outcome: 'error' });
    expect(lines.at(-1)).toMatchObject({
      level: 'error',
      fields: { task: 'explode', traceId: trace.traceId, detached: true, detachedFrom: trace.spanId },
    });
  });

  it('a logger that throws changes nothing: the task still succeeds, the drain still returns', async () => {
    const broken: LoggerLike = {
      info: () => {
        throw new Error('logger down');
      },
      warn: () => {
        throw new Error('logger down');
      },
      error: () => {
        throw new Error('logger down');
      },
    };
    const tasks = new Background({ logger: broken });
    const stderr = process.stderr.write;
    process.stderr.write = () => true; // the fallback line goes to stderr: keep the test output clean
    try {
      expect(await tasks.run('fine', () => 'ok')).toMatchObject({ outcome: 'ok' });
      tasks.run('stuck', () => new Promise(() => {}));
      expect((await tasks.drain({ timeoutMs: 50 })).pending).toHaveLength(1);
    } finally {
      process.stderr.write = stderr;
    }
  });

  it('bad arguments are refused with a clear error', () => {
    const tasks = new Background();
    expect(() => tasks.run('', () => {})).toThrow(/name/);
    expect(() => tasks.run('x', 'not a function' as never)).toThrow(/fn/);
    expect(() => tasks.run('x', () => {}, { budgetMs: -1 })).toThrow(/budgetMs/);
  });

  it('closeAndDrain(): a plain server finishes its request in flight, then the work it started, in one budget', async () => {
    const { logger, lines } = recordingLogger();
    const tasks = new Background({ logger });
    let answer!: () => void;
    const server = createServer((_req, res) => {
      tasks.run('after-response', () => new Promise((resolve) => setTimeout(resolve, 200)));
      answer = () => res.end('ok');
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as { port: number };
    const response = request(`http://127.0.0.1:${port}/`);
    while (answer === undefined) await new Promise((resolve) => setImmediate(resolve));
    const shutdown = closeAndDrain(server, { timeoutMs: 5_000, background: tasks });
    answer();
    expect(await (await response).body.text()).toBe('ok');
    const report = await shutdown;
    expect(report).toEqual({ serverClosed: true, completed: 1, pending: [] });
    expect(lines).toContainEqual(expect.objectContaining({ message: 'background task done' }));
  });

  it('fastify: app.close() drains detached work', async () => {
    const { logger } = recordingLogger();
    const tasks = new Background({ logger });
    const app = Fastify();
    await app.register(fastifyBackground, { background: tasks, drainTimeoutMs: 5_000 });
    let done = false;
    app.get('/', async () => {
      tasks.run('late', async () => {
        await new Promise((resolve) => setTimeout(resolve, 200));
        done = true;
      });
      return 'ok';
    });
    expect((await app.inject('/')).body).toBe('ok');
    await app.close();
    expect(done).toBe(true);
  });
});
