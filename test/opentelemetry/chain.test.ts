/**
 * The library inside an OpenTelemetry set-up, as services run it: three processes, each with a tracer provider
 * and the http, undici, fastify (@fastify/otel), express, pg and pino instrumentations registered before the app —
 * gateway (fastify + @deadline/fastify) → orders (express + @deadline/express) → inventory (node:http +
 * @deadline/server, PostgreSQL through @deadline/pg), each calling the next with the global fetch() after
 * installGlobalDispatcher(), and DeadlineSpanProcessor in each tracer provider. The packages run from their
 * sources (test/support/source-hooks.mjs).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../support/services.ts';

const here = fileURLToPath(new URL('.', import.meta.url));
const sourceHooks = fileURLToPath(new URL('../support/source-hooks.mjs', import.meta.url));
const available = await requireService(POSTGRES);

interface SpanLine {
  hop: string;
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  attributes: Record<string, unknown>;
  events: { name: string; attributes: Record<string, unknown> }[];
  status: { code: number; message?: string };
}

interface Hop {
  name: string;
  url: string;
  process: ChildProcess;
  lines: Record<string, unknown>[];
  spansFile: string;
}

/** What a hop answers: how many traceparent headers it received, and what came back from further down. */
interface Answer {
  traceparents: number;
  body: Answer;
}

const SERVER = 1;
const CLIENT = 2;

/** A trace id and span id as a client would send them: the client span's. */
function clientSpan() {
  const hex = (bytes: number) =>
    Array.from({ length: bytes }, () =>
      Math.floor(Math.random() * 256)
        .toString(16)
        .padStart(2, '0'),
    ).join('');
  return { traceId: hex(16), spanId: hex(8) };
}

describe.runIf(available)('OpenTelemetry across three hops (real SDK and instrumentations)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'deadline-otel-'));
  const hops: Record<string, Hop> = {};
  const warmUp = clientSpan();

  async function start(name: string, next: string | undefined, logKeys = '-'): Promise<Hop> {
    const spansFile = join(dir, `${name}.spans`);
    const child = spawn(
      process.execPath,
      [
        '--conditions=@deadline/source',
        '--import',
        sourceHooks,
        '--import',
        join(here, 'fixtures/register-otel.mjs'),
        join(here, 'fixtures/hop.mjs'),
        name,
        next ?? '-',
        logKeys,
        spansFile,
        POSTGRES.url,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const lines: Record<string, unknown>[] = [];
    let port: number | undefined;
    const listening = new Promise<void>((resolve, reject) => {
      child.once('exit', (code) => reject(new Error(`hop ${name} exited with ${code} before listening`)));
      createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
        const parsed = JSON.parse(line) as Record<string, unknown>;
        if (port === undefined && typeof parsed.listening === 'number') {
          port = parsed.listening;
          resolve();
        } else {
          lines.push(parsed);
        }
      });
    });
    await listening;
    return { name, url: `http://127.0.0.1:${port}`, process: child, lines, spansFile };
  }

  function spansOf(hop: Hop, traceId?: string): SpanLine[] {
    if (!existsSync(hop.spansFile)) return [];
    const text = readFileSync(hop.spansFile, 'utf8');
    // The hop may be appending as this reads (CI, Node 22: a line cut at its 53rd character): only the lines it
    // has ended count; the rest is read at the next poll.
    const spans = text
      .slice(0, text.lastIndexOf('\n') + 1)
      .split('\n')
      .filter((line) => line.length > 0)
      .map((line) => JSON.parse(line) as SpanLine);
    return traceId === undefined ? spans : spans.filter((span) => span.traceId === traceId);
  }

  /**
   * Waits until `ready` holds for the spans of every hop (polling the exporters' files) and every hop has
   * written its end-of-request line for the trace (written on the response's close, after the client has its
   * answer); fails after 10 s.
   */
  async function spansWhen(traceId: string, ready: (spans: SpanLine[]) => boolean): Promise<SpanLine[]> {
    const until = performance.now() + 10_000;
    for (;;) {
      const spans = Object.values(hops).flatMap((hop) => spansOf(hop, traceId));
      const ended = Object.values(hops).every((hop) =>
        hop.lines.some(
          (line) =>
            (line.traceId ?? line.trace_id) === traceId &&
            String(line.msg).startsWith('deadline: ') &&
            'budgetSource' in line,
        ),
      );
      if (ended && ready(spans)) return spans;
      if (performance.now() > until) throw new Error(`spans not complete after 10 s: ${JSON.stringify(spans)}`);
      await sleep(50);
    }
  }

  beforeAll(async () => {
    hops.inventory = await start('inventory', undefined);
    hops.orders = await start('orders', hops.inventory.url);
    hops.gateway = await start('gateway', hops.orders.url, 'otel');
    // Warmed up, with time to spare: each hop loads its modules and the pg connection on its first request, which
    // on a loaded machine took longer than a test's budget (CI, Node 22: 504 for the first 1.5 s request). The
    // checks below look at their own traces (and at this one's).
    await order(warmUp, 20_000);
  }, 45_000);

  afterAll(async () => {
    await Promise.all(
      Object.values(hops).map(async (hop) => {
        if (hop.process.exitCode !== null) return;
        hop.process.kill();
        await once(hop.process, 'exit');
      }),
    );
    rmSync(dir, { recursive: true, force: true });
  });

  async function order(client: { traceId: string; spanId: string }, budgetMs: number, sleepMs = 0) {
    const response = await fetch(`${hops.gateway?.url}/order?sleep=${sleepMs}`, {
      headers: { 'x-request-deadline': String(budgetMs), traceparent: `00-${client.traceId}-${client.spanId}-01` },
    });
    return { status: response.status, headers: response.headers, body: (await response.json()) as Answer };
  }

  const serverSpan = (spans: SpanLine[], hop: string) =>
    spans.find((span) => span.hop === hop && span.kind === SERVER) as SpanLine;

  it('one traceparent per request and one trace id at every hop; the server spans carry the deadline', async () => {
    const client = clientSpan();
    const { status, body } = await order(client, 1_500);
    expect(status).toBe(200);
    // Exactly one traceparent reached each hop (two would be joined into "a, b" and start new traces).
    expect(body.traceparents).toBe(1);
    expect(body.body.traceparents).toBe(1);
    expect(body.body.body.traceparents).toBe(1);

    // The audit's parent (the span active in express's handler) may be exported after the audit itself (CI, Node
    // 22): it is waited for too.
    const ours = await spansWhen(client.traceId, (all) => {
      const audit = all.find((span) => span.name === 'background audit');
      return (
        ['gateway', 'orders', 'inventory'].every((hop) => serverSpan(all, hop)) &&
        audit !== undefined &&
        all.some((span) => span.spanId === audit.parentSpanId)
      );
    });
    // Every server span so far, at every hop, is in the client's trace (or the warm-up's): no hop started a trace
    // of its own.
    const traceIds = new Set(
      Object.values(hops)
        .flatMap((hop) => spansOf(hop))
        .filter((span) => span.kind === SERVER)
        .map((span) => span.traceId),
    );
    expect([...traceIds].sort()).toEqual([client.traceId, warmUp.traceId].sort());

    const gateway = serverSpan(ours, 'gateway');
    const orders = serverSpan(ours, 'orders');
    const inventory = serverSpan(ours, 'inventory');
    expect(gateway.parentSpanId).toBe(client.spanId);
    // @fastify/otel's spans at the gateway are in the same trace, under its server span.
    expect(
      ours.some(
        (span) => span.hop === 'gateway' && span.name.startsWith('request') && span.parentSpanId === gateway.spanId,
      ),
    ).toBe(true);
    // Each server span's parent is the caller's undici client span.
    const clientOf = (server: SpanLine) => ours.find((span) => span.spanId === server.parentSpanId) as SpanLine;
    expect(clientOf(orders)).toMatchObject({ hop: 'gateway', kind: CLIENT });
    expect(clientOf(inventory)).toMatchObject({ hop: 'orders', kind: CLIENT });

    expect(gateway.attributes).toMatchObject({
      'deadline.hop': 'gateway',
      'deadline.budget_ms': 1_500,
      'deadline.source': 'x-request-deadline',
      'deadline.trusted': false, // the edge trusts no caller: 1,500 ms shortens its default
      'deadline.outcome': 'ok',
    });
    // Downstream budgets: what the caller had left, minus its margin.
    expect(orders.attributes['deadline.budget_ms']).toBeLessThan(1_500);
    // inventory clamps what it was sent to its route maximum, and says what it was asked.
    expect(inventory.attributes).toMatchObject({
      'deadline.hop': 'inventory',
      'deadline.budget_ms': 300,
      'deadline.outcome': 'ok',
    });
    expect(inventory.attributes['deadline.requested_ms']).toBeLessThan(
      orders.attributes['deadline.budget_ms'] as number,
    );
    expect(inventory.attributes['deadline.requested_ms']).toBeGreaterThan(300);

    // The detached task is a span of its own in the same trace, under the request's spans at orders.
    const audit = ours.find((span) => span.name === 'background audit') as SpanLine;
    expect(audit).toMatchObject({ hop: 'orders', attributes: { 'deadline.task': 'audit', 'deadline.outcome': 'ok' } });
    expect(ours.some((span) => span.hop === 'orders' && span.spanId === audit.parentSpanId)).toBe(true);
  });

  it('pino lines carry the ids the spans carry, under either set of names', async () => {
    const client = clientSpan();
    const { status } = await order(client, 1_500);
    expect(status).toBe(200);
    const ours = await spansWhen(
      client.traceId,
      (all) =>
        ['gateway', 'orders', 'inventory'].every((hop) => serverSpan(all, hop)) &&
        all.some((span) => span.name === 'background audit'),
    );

    // gateway: OTEL_LOG_KEYS (trace_id, span_id, trace_flags), as the pino instrumentation writes them.
    const gatewayLines = (hops.gateway as Hop).lines.filter((line) => line.trace_id === client.traceId);
    expect(gatewayLines.map((line) => line.msg)).toEqual(
      expect.arrayContaining(['ordering', 'deadline: call ok', 'deadline: ok']),
    );
    for (const line of gatewayLines) {
      expect(line).toMatchObject({ span_id: serverSpan(ours, 'gateway').spanId, trace_flags: '01' });
    }

    // orders and inventory: this library's own names; the pino instrumentation's trace_id agrees with them.
    for (const hop of ['orders', 'inventory']) {
      const lines = (hops[hop] as Hop).lines.filter((line) => line.traceId === client.traceId);
      expect(lines.length).toBeGreaterThanOrEqual(3);
      const server = serverSpan(ours, hop);
      for (const line of lines.filter((line) => line.msg !== 'audit written' && line.msg !== 'background task done')) {
        expect(line.spanId, `${hop}: ${line.msg}`).toBe(server.spanId);
        expect(line.trace_id, `${hop}: ${line.msg}`).toBe(client.traceId);
      }
    }
    // The detached task's lines carry its own span.
    const audit = ours.find((span) => span.name === 'background audit') as SpanLine;
    const auditLines = (hops.orders as Hop).lines.filter(
      (line) => line.msg === 'audit written' && line.traceId === client.traceId,
    );
    expect(auditLines).toHaveLength(1);
    expect(auditLines[0]).toMatchObject({ spanId: audit.spanId, span_id: audit.spanId });
  });

  it('a deadline that fires at the last hop: 504 naming it, and the outcome and the moment on each server span', async () => {
    const client = clientSpan();
    const sentAt = performance.now();
    const { status, headers } = await order(client, 1_000, 3_000);
    const elapsed = performance.now() - sentAt;
    expect(status).toBe(504);
    expect(headers.get('x-deadline-exceeded-by')).toBe('inventory');
    const ours = await spansWhen(client.traceId, (all) =>
      ['gateway', 'orders', 'inventory'].every((hop) => serverSpan(all, hop)),
    );
    const inventory = serverSpan(ours, 'inventory');
    expect(inventory.attributes).toMatchObject({
      'deadline.outcome': 'deadline_exceeded',
      'deadline.exceeded_by': 'inventory',
    });
    const fired = inventory.events.find((event) => event.name === 'deadline.exceeded');
    expect(fired?.attributes).toMatchObject({ 'deadline.exceeded_by': 'inventory' });
    expect(fired?.attributes['deadline.elapsed_ms']).toBeGreaterThanOrEqual(
      (inventory.attributes['deadline.budget_ms'] as number) - 1,
    );
    for (const hop of ['gateway', 'orders']) {
      expect(serverSpan(ours, hop).attributes, hop).toMatchObject({
        'deadline.outcome': 'deadline_exceeded',
        'deadline.exceeded_by': 'inventory',
      });
    }
    // DeadlineSpanProcessor: the statement's pg span at inventory was cut off, and the server confirmed it.
    const statement = ours.find(
      (span) => span.hop === 'inventory' && String(span.attributes['db.query.text']).includes('pg_sleep'),
    );
    expect(statement?.attributes).toMatchObject({
      'deadline.cancel': 'confirmed',
      'deadline.confirmed_by': 'postgres 57014',
    });
    expect(statement?.events.map((event) => event.name)).toEqual(
      expect.arrayContaining(['deadline.exceeded', 'deadline.cancel_requested', 'deadline.cancel_confirmed']),
    );
    // Each hop's call to the next carries its budget on its undici span.
    const call = ours.find((span) => span.hop === 'gateway' && span.kind === CLIENT);
    // The budget less what had passed by then (at most the whole request's time, however slow the machine).
    expect(call?.attributes['deadline.remaining_ms']).toBeGreaterThanOrEqual(1_000 - elapsed - 1);
    expect(call?.attributes['deadline.timeout_ms']).toBeLessThan(call?.attributes['deadline.remaining_ms'] as number);
  });
});
