/**
 * DeadlineSpanProcessor with the real SDK and the real undici, pg and ioredis instrumentations: each call's own
 * span gets its budget, the moment it was cut off, and the server's confirmation of the stop. PostgreSQL and
 * Redis are the ones running here; the HTTP downstream is a local server that never answers.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { CancelledError, createContext, currentContext, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { deadlineInterceptor } from '@deadline/http';
import { instrumentPg, withDeadline as withPgDeadline } from '@deadline/pg';
import { context, propagation, SpanKind, trace } from '@opentelemetry/api';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import { MySQL2Instrumentation } from '@opentelemetry/instrumentation-mysql2';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import {
  InMemorySpanExporter,
  NodeTracerProvider,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-node';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MARIADB, POSTGRES, REDIS, requireService } from '../../../test/support/services.ts';
import { DeadlineSpanProcessor } from '../src/index.ts';

const exporter = new InMemorySpanExporter();
const processor = new DeadlineSpanProcessor();
const provider = new NodeTracerProvider({ spanProcessors: [processor, new SimpleSpanProcessor(exporter)] });
provider.register();
const instrumentations = registerInstrumentations({
  instrumentations: [
    new UndiciInstrumentation(),
    new PgInstrumentation(),
    new IORedisInstrumentation(),
    new MySQL2Instrumentation(),
  ],
});
// Through require(), where the instrumentations hook the drivers.
const require = createRequire(import.meta.url);
const pg = require('pg') as typeof import('pg');
const { Redis } = require('ioredis') as typeof import('ioredis');
const mysql = require('mysql2/promise') as typeof import('mysql2/promise');
// After: @deadline/redis and @deadline/mysql import their drivers, which must be required (and hooked) first.
const { withDeadline: withRedisDeadline } = await import('@deadline/redis');
const { withDeadline: withMysqlDeadline } = await import('@deadline/mysql');

afterAll(async () => {
  instrumentations();
  await provider.shutdown();
  trace.disable();
  context.disable();
  propagation.disable();
});
beforeEach(() => exporter.reset());

const clientSpans = (match: (span: ReadableSpan) => boolean) =>
  exporter.getFinishedSpans().filter((span) => span.kind === SpanKind.CLIENT && match(span));
/** The first finished span that matches, once the exporter has it (its end may come after the caller's answer). */
async function ended(match: (span: ReadableSpan) => boolean): Promise<ReadableSpan> {
  const until = performance.now() + 5_000;
  for (;;) {
    const [span] = clientSpans(match);
    if (span !== undefined) return span;
    if (performance.now() > until) throw new Error('no such span ended within 5 s');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The events this project adds (the instrumentations add their own, `exception` say). */
const eventNames = (span: ReadableSpan | undefined) =>
  span?.events.map((event) => event.name).filter((name) => name.startsWith('deadline.'));

describe('fetch/undici', () => {
  let silent: Server;
  let url: string;
  const agent = new Agent().compose(deadlineInterceptor());
  beforeAll(async () => {
    silent = createServer((req, res) => {
      if (req.url === '/ok') res.end('ok');
      // Otherwise never answers.
    });
    silent.listen(0, '127.0.0.1');
    await once(silent, 'listening');
    url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    silent.closeAllConnections();
    silent.close();
    await agent.close();
  });

  it('a call in time: its span says how much was left and what timeout it was given; nothing cut', async () => {
    const before = performance.now();
    await runWithDeadline(1_000, async () => {
      const res = await request(`${url}/ok`, { dispatcher: agent });
      await res.body.text();
    });
    const left = 1_000 - (performance.now() - before) - 1;
    const [span] = clientSpans((s) => String(s.attributes['url.full']).endsWith('/ok'));
    // The budget less what had passed by the call's start (at most all of it, however slow the machine).
    expect(span?.attributes['deadline.remaining_ms']).toBeGreaterThanOrEqual(left);
    expect(span?.attributes['deadline.timeout_ms']).toBeGreaterThanOrEqual(left);
    expect(span?.attributes['deadline.cancel']).toBeUndefined();
    expect(eventNames(span)).toEqual([]);
  });

  it('a call cut off at the deadline: the moment, and its stop requested (no server to confirm it)', async () => {
    const error = await runWithDeadline(200, () => request(`${url}/silent`, { dispatcher: agent })).catch((e) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    const [span] = clientSpans((s) => String(s.attributes['url.full']).endsWith('/silent'));
    expect(eventNames(span)).toEqual(expect.arrayContaining(['deadline.exceeded', 'deadline.cancel_requested']));
    expect(span?.attributes).toMatchObject({ 'deadline.cancel': 'requested', 'deadline.outcome': 'deadline_exceeded' });
    const fired = span?.events.find((event) => event.name === 'deadline.exceeded');
    expect(fired?.attributes?.['deadline.elapsed_ms']).toBeGreaterThanOrEqual(150);
  });
});

const postgres = await requireService(POSTGRES);

describe.runIf(postgres)('PostgreSQL', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2 });
  const db = withPgDeadline(pool);
  afterAll(() => pool.end());

  it("instrumentPg over the pg instrumentation's patch: an ORM's own client's cut statement, on its pg span", async () => {
    // The app's order: the SDK and its instrumentations first (they patch pg as it loads), instrumentPg after.
    const undo = instrumentPg(pg);
    const client = new pg.Client({ connectionString: POSTGRES.url }); // as Knex or TypeORM make their own
    await client.connect();
    try {
      const error = await runWithDeadline(300, () => client.query('select pg_sleep(5) /* instrumented */')).catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(DeadlineExceededError);
      const span = await ended((s) => String(s.attributes['db.query.text']).includes('instrumented'));
      expect(span.attributes['deadline.timeout_ms']).toBeLessThanOrEqual(300);
      expect(eventNames(span)).toEqual(['deadline.exceeded', 'deadline.cancel_requested', 'deadline.cancel_confirmed']);
      expect(span.attributes).toMatchObject({
        'deadline.cancel': 'confirmed',
        'deadline.confirmed_by': 'postgres 57014',
      });
    } finally {
      await client.end();
      undo();
    }
  });

  it('a statement cut off: cancel requested, then confirmed by the server (57014), on the pg span', async () => {
    const error = await runWithDeadline(300, () => db.query('select pg_sleep(5)')).catch((e) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    // The span ends as the instrumentation hears of the failure, which may be a moment after the caller did (a CI run
    // on Node 24, under load, read it before).
    await ended((s) => String(s.attributes['db.query.text']).includes('pg_sleep'));
    const spans = clientSpans((s) => String(s.attributes['db.query.text']).includes('pg_sleep'));
    expect(spans).toHaveLength(1);
    const [span] = spans;
    expect(span?.attributes['deadline.timeout_ms']).toBeLessThanOrEqual(300);
    expect(eventNames(span)).toEqual(['deadline.exceeded', 'deadline.cancel_requested', 'deadline.cancel_confirmed']);
    expect(span?.attributes).toMatchObject({
      'deadline.cancel': 'confirmed',
      'deadline.confirmed_by': 'postgres 57014',
    });
  });

  it('a statement in time: the budget on its span, no cancel', async () => {
    const before = performance.now();
    await runWithDeadline(1_000, () => db.query('select 1 as one'));
    const left = 1_000 - (performance.now() - before) - 1;
    const [span] = clientSpans((s) => String(s.attributes['db.query.text']).includes('select 1'));
    expect(span?.attributes['deadline.remaining_ms']).toBeGreaterThanOrEqual(left);
    expect(span?.attributes['deadline.cancel']).toBeUndefined();
  });
});

const mariadb = await requireService(MARIADB);

describe.runIf(mariadb)('MariaDB', () => {
  const killOrBelt = expect.stringMatching(/^(KILL QUERY|max_statement_time)$/);
  const pool = mysql.createPool({ uri: MARIADB.url, connectionLimit: 2 });
  const db = withMysqlDeadline(pool);
  afterAll(() => db.end());

  it('a statement cut off: KILL QUERY requested, then confirmed by its OK, on the mysql2 span', async () => {
    const error = await runWithDeadline(300, () => db.query('SELECT SLEEP(5)')).catch((e) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    const span = await ended((s) =>
      String(s.attributes['db.statement'] ?? s.attributes['db.query.text']).includes('SLEEP(5)'),
    );
    expect(span.attributes['deadline.timeout_ms']).toBeLessThanOrEqual(300);
    expect(eventNames(span)).toEqual(['deadline.exceeded', 'deadline.cancel_requested', 'deadline.cancel_confirmed']);
    // Or by the belt, when a loaded machine ran the stop late (pinned by the blocked-event-loop test below).
    expect(span.attributes).toMatchObject({ 'deadline.cancel': 'confirmed', 'deadline.confirmed_by': killOrBelt });
  });

  it('an event loop blocked as the deadline fires: the server limit (the belt) stops it first, and confirms it', async () => {
    // Blocked for 400 ms at the deadline, before the call's own stop runs: the server's limit (the deadline plus
    // the belt's slack) fires meanwhile, so the statement's 1969 is on its way before our KILL is sent.
    const error = await runWithDeadline(300, () => {
      currentContext()?.onStop(() => {
        const until = performance.now() + 400;
        while (performance.now() < until);
      });
      return db.query('SELECT SLEEP(5) AS blocked');
    }).catch((e) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    const span = await ended((s) =>
      String(s.attributes['db.statement'] ?? s.attributes['db.query.text']).includes('AS blocked'),
    );
    expect(eventNames(span)).toEqual(['deadline.exceeded', 'deadline.cancel_requested', 'deadline.cancel_confirmed']);
    expect(span.attributes).toMatchObject({
      'deadline.cancel': 'confirmed',
      'deadline.confirmed_by': 'max_statement_time',
    });
  });

  it('a prepared statement cut off: confirmed on the span of its EXECUTE (sent behind its PREPARE)', async () => {
    const error = await runWithDeadline(300, () => db.execute('SELECT SLEEP(?) AS prepared', [5])).catch((e) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    const span = await ended((s) =>
      String(s.attributes['db.statement'] ?? s.attributes['db.query.text']).includes('AS prepared'),
    );
    expect(eventNames(span)).toEqual(['deadline.exceeded', 'deadline.cancel_requested', 'deadline.cancel_confirmed']);
    // Or by the belt, when a loaded machine ran the stop late (as the blocked-event-loop test above pins).
    expect(span.attributes).toMatchObject({ 'deadline.cancel': 'confirmed', 'deadline.confirmed_by': killOrBelt });
  });
});

const redis = await requireService(REDIS);

describe.runIf(redis)('Redis', () => {
  const client = new Redis(REDIS.url, { maxRetriesPerRequest: 1 });
  const watcher = new Redis(REDIS.url, { maxRetriesPerRequest: 1 });
  const db = withRedisDeadline(client);
  afterAll(() => Promise.all([client.quit(), watcher.quit()]));
  // instrumentation-ioredis makes spans only under a parent (requireParentSpan), as in a request.
  const inRequest = <R>(fn: () => Promise<R>) =>
    trace.getTracer('test').startActiveSpan('GET /stock', (span) => fn().finally(() => span.end()));

  /** Resolves once the server lists `clientId` as blocked on a command. */
  async function blocked(clientId: number): Promise<void> {
    for (;;) {
      const list = String(await watcher.call('client', 'list', 'id', String(clientId)));
      if (/ flags=\S*b/.test(list)) return;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  it('a blocking command cancelled mid-wait: cancel requested, then the UNBLOCK’s answer, on the ioredis span', async () => {
    const key = `deadline-otel-${process.pid}`;
    const clientId = Number(await client.client('ID'));
    const ctx = createContext({ deadline: 5_000 });
    const pending = inRequest(() => ctx.run(() => db.blpop(key, 0))).catch((error: unknown) => error);
    await blocked(clientId);
    ctx.cancel(new CancelledError('the client left', { reason: 'client-disconnected' }));
    expect(await pending).toBeInstanceOf(CancelledError);
    ctx.end();
    // The caller is answered at once; the command's reply (released by the UNBLOCK) ends its span after.
    const span = await ended((s) => s.name === 'blpop');
    expect(span?.attributes['deadline.timeout_ms']).toBeGreaterThan(4_000);
    expect(eventNames(span)?.slice(0, 2)).toEqual(['deadline.cancelled', 'deadline.cancel_requested']);
    expect(span?.attributes['deadline.outcome']).toBe('cancelled');
    expect(['requested', 'confirmed']).toContain(span?.attributes['deadline.cancel']);
    console.log(`blpop span: deadline.cancel ${span?.attributes['deadline.cancel']}`);
  });

  it('a command in time: the budget on its span', async () => {
    const before = performance.now();
    await inRequest(() => runWithDeadline(1_000, () => db.get('deadline-otel-missing')));
    const left = 1_000 - (performance.now() - before) - 1;
    const [span] = clientSpans((s) => s.name === 'get');
    expect(span?.attributes['deadline.remaining_ms']).toBeGreaterThanOrEqual(left);
  });
});

describe('without the processor', () => {
  it('after shutdown() nothing is written on call spans', async () => {
    await processor.shutdown();
    const server = createServer((_req, res) => res.end('ok'));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const agent = new Agent().compose(deadlineInterceptor());
    try {
      await runWithDeadline(1_000, async () => {
        const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, { dispatcher: agent });
        await res.body.text();
      });
      const [span] = clientSpans(() => true);
      expect(span).toBeDefined();
      expect(span?.attributes['deadline.remaining_ms']).toBeUndefined();
    } finally {
      await agent.close();
      server.close();
    }
  });
});
