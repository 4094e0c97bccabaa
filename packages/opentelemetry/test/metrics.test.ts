/**
 * recordDeadlineMetrics read through the real SDK (a MeterProvider exporting to memory, delta temporality: each
 * collection holds only what was recorded since the one before), over real traffic: `orders`, a `deadlineHandler`
 * server, called with `x-request-deadline`, calls `inventory` (another one) through `@deadline/http`, PostgreSQL
 * through `@deadline/pg`, and `pricing`, a gRPC server of `@deadline/grpc`. Each test waits for the events it reads
 * (the hops' request lines, the server's confirmation of a cancel) before it collects.
 */
import diagnostics from 'node:diagnostics_channel';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type CallCancelMessage, DiagnosticsChannel, type ExceededMessage, InvalidArgumentError } from '@deadline/core';
import { publishAdmissionRefused } from '@deadline/core/internal';
import { deadlineService, withDeadline as withGrpcDeadline } from '@deadline/grpc';
import { deadlineInterceptor } from '@deadline/http';
import { withDeadline as withPgDeadline } from '@deadline/pg';
import { type DeadlineRequest, deadlineHandler, REQUEST_END_CHANNEL, type RequestLine } from '@deadline/server';
import grpc from '@grpc/grpc-js';
import { metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  DataPointType,
  InMemoryMetricExporter,
  MeterProvider,
  type MetricData,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import pg from 'pg';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { recordDeadlineMetrics } from '../src/index.ts';
import { BUDGET_BUCKETS_MS } from '../src/instruments.ts';

/** A meter provider read on demand: `collect()` exports what was recorded since the last one. */
function testProvider() {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.DELTA);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const provider = new MeterProvider({ readers: [reader] });
  async function collect(): Promise<Map<string, MetricData>> {
    exporter.reset();
    await reader.forceFlush();
    const found = new Map<string, MetricData>();
    for (const resource of exporter.getMetrics()) {
      for (const scope of resource.scopeMetrics) {
        expect(scope.scope).toMatchObject({ name: '@deadline/opentelemetry', version: '0.1.0' });
        for (const metric of scope.metrics) found.set(metric.descriptor.name, metric);
      }
    }
    return found;
  }
  return { provider, collect };
}

/** A metric's points: a counter's value, a histogram's count and sum. None when it recorded nothing. */
function points(found: Map<string, MetricData>, name: string) {
  const metric = found.get(name);
  if (metric === undefined) return [];
  return metric.dataPoints.map(({ attributes, value }) =>
    typeof value === 'number'
      ? { attributes, value }
      : { attributes, count: (value as { count: number }).count, sum: (value as { sum: number }).sum },
  );
}

/** The next message on `channel` that `match` accepts. */
function next<T>(channel: string, match: (message: T) => boolean = () => true): Promise<T> {
  return new Promise((resolve) => {
    const onMessage = (message: unknown) => {
      if (!match(message as T)) return;
      diagnostics.unsubscribe(channel, onMessage);
      resolve(message as T);
    };
    diagnostics.subscribe(channel, onMessage);
  });
}
const lineOf = (hop: string) => next<RequestLine>(REQUEST_END_CHANNEL, (line) => line.hop === hop);
/** The next expiry of a context of `hop` that had `budgetMs`. */
const expiry = (hop: string, budgetMs: number) =>
  next<ExceededMessage>(
    DiagnosticsChannel.Exceeded,
    ({ context, error }) => error.phase === 'in-handler' && context?.hop === hop && error.budgetMs === budgetMs,
  );
/**
 * PostgreSQL's confirmation of the next cancel. Bounded: on a machine so busy that the deadline's timer runs more than
 * the belt's 50 ms grace late, the server's own statement_timeout stops the statement first, and nothing is cancelled.
 */
function confirmation(): Promise<CallCancelMessage> {
  const confirmed = next<CallCancelMessage>(DiagnosticsChannel.CallCancel, (message) => message.state === 'confirmed');
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('no cancel confirmed within 10 s (the belt fired first?)')), 10_000);
  });
  return Promise.race([confirmed, late]).finally(() => clearTimeout(timer));
}

/** `pricing`, a gRPC service without a .proto: JSON messages. */
const json = {
  serialize: (value: unknown) => Buffer.from(JSON.stringify(value)),
  deserialize: (bytes: Buffer) => JSON.parse(bytes.toString()) as unknown,
};
const Pricing = {
  quote: {
    path: '/deadline.test.Pricing/Quote',
    originalName: 'quote',
    requestStream: false,
    responseStream: false,
    requestSerialize: json.serialize,
    requestDeserialize: json.deserialize,
    responseSerialize: json.serialize,
    responseDeserialize: json.deserialize,
  },
} satisfies grpc.ServiceDefinition;
const PricingClient = grpc.makeGenericClientConstructor(Pricing, 'Pricing');
type Quote = (request: unknown, callback: (error: unknown, value: unknown) => void) => void;
const quote = (client: grpc.Client) =>
  new Promise((resolve, reject) =>
    (client as unknown as { quote: Quote }).quote({ sku: '42' }, (error, value) =>
      error === null ? resolve(value) : reject(error),
    ),
  );

async function listen(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

it('checks its options', () => {
  expect(() => recordDeadlineMetrics({ meterProvider: {} as never })).toThrow(InvalidArgumentError);
  expect(() => recordDeadlineMetrics({ target: 'inventory' as never })).toThrow(/target must be a function/);
});

const postgres = await requireService(POSTGRES);

describe.runIf(postgres)('over real servers', () => {
  const { provider, collect } = testProvider();
  const stop = recordDeadlineMetrics({ meterProvider: provider });
  const pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2 });
  const db = withPgDeadline(pool);
  const outgoing = new Agent().compose(deadlineInterceptor({ marginMs: 20 }));
  const client = new Agent();
  const grpcServer = new grpc.Server();
  let pricing: grpc.Client;
  let inventoryUrl: string;
  let ordersUrl: string;

  const inventory = createServer(deadlineHandler((_req, res) => res.end('7'), { serviceName: 'inventory' }));
  const orders = createServer(
    deadlineHandler(
      async (req: DeadlineRequest, res) => {
        if (req.url === '/order') {
          const stock = await request(`${inventoryUrl}/stock/42?at=1`, { dispatcher: outgoing });
          await stock.body.text();
          await db.query('select 1 as one');
        } else if (req.url === '/slow') {
          await db.query('select pg_sleep(5)');
        } else if (req.url === '/quote') {
          await quote(pricing);
        } else if (req.url === '/signal') {
          req.deadline.context.signal?.addEventListener('abort', () => {}); // held past the answer
        }
        res.end('ok');
      },
      { serviceName: 'orders', defaultMs: 2_000 },
    ),
  );
  const get = (path: string, budgetMs?: number) =>
    request(`${ordersUrl}${path}`, {
      dispatcher: client,
      headers: budgetMs === undefined ? {} : { 'x-request-deadline': String(budgetMs) },
    });

  beforeAll(async () => {
    // A connection ready in the pool: a statement cut at a short deadline is then surely on the server, to be cancelled.
    await pool.query('select 1');
    inventoryUrl = await listen(inventory);
    ordersUrl = await listen(orders);
    grpcServer.addService(
      Pricing,
      deadlineService(
        Pricing,
        { quote: (_call: unknown, done: grpc.sendUnaryData<unknown>) => done(null, { n: 1 }) },
        {
          serviceName: 'pricing',
          defaultMs: 1_500,
        },
      ),
    );
    const port = await new Promise<number>((resolve, reject) =>
      grpcServer.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, bound) =>
        error === null ? resolve(bound) : reject(error),
      ),
    );
    pricing = new PricingClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), withGrpcDeadline());
  });
  afterAll(async () => {
    stop();
    pricing.close();
    grpcServer.forceShutdown();
    for (const server of [inventory, orders]) {
      server.closeAllConnections();
      server.close();
    }
    await Promise.all([outgoing.close(), client.close(), pool.end(), provider.shutdown()]);
  });
  // What earlier tests left (a late line, a late confirmation) is not read by the next.
  beforeEach(() => collect());

  it('a request in time: the budget it arrived with at each hop, and what was left at each call, per target', async () => {
    const lines = Promise.all([lineOf('orders'), lineOf('inventory')]);
    const res = await get('/order', 800);
    expect(res.statusCode).toBe(200);
    await res.body.text();
    const [, inventoryLine] = await lines;
    const found = await collect();

    const budget = found.get('deadline.request.budget');
    expect(budget?.descriptor).toMatchObject({ unit: 'ms', type: 'HISTOGRAM' });
    expect(budget?.dataPointType).toBe(DataPointType.HISTOGRAM);
    expect(
      (budget?.dataPoints[0]?.value as { buckets: { boundaries: number[] } } | undefined)?.buckets.boundaries,
    ).toEqual(BUDGET_BUCKETS_MS);
    // orders: the caller's 800 ms; inventory: what orders sent it (what was left, less the 20 ms margin).
    expect(inventoryLine.budgetMs).toBeGreaterThan(0);
    expect(inventoryLine.budgetMs).toBeLessThanOrEqual(780);
    expect(points(found, 'deadline.request.budget')).toEqual(
      expect.arrayContaining([
        { attributes: { 'deadline.hop': 'orders', 'deadline.source': 'header' }, count: 1, sum: 800 },
        {
          attributes: { 'deadline.hop': 'inventory', 'deadline.source': 'header' },
          count: 1,
          sum: inventoryLine.budgetMs,
        },
      ]),
    );
    expect(points(found, 'deadline.request.budget')).toHaveLength(2);

    // The HTTP call's target without its path (ids) and query; the database's by its name.
    const calls = points(found, 'deadline.call.remaining_budget');
    expect(found.get('deadline.call.remaining_budget')?.descriptor.unit).toBe('ms');
    expect(calls.map((point) => point.attributes)).toEqual(
      expect.arrayContaining([
        { 'deadline.hop': 'orders', 'deadline.target': `GET ${inventoryUrl}` },
        { 'deadline.hop': 'orders', 'deadline.target': 'postgres:test' },
      ]),
    );
    expect(calls).toHaveLength(2);
    for (const call of calls) {
      expect(call).toMatchObject({ count: 1 });
      expect(call.sum).toBeGreaterThan(0);
      expect(call.sum).toBeLessThanOrEqual(800);
    }
    for (const name of [
      'deadline.expirations',
      'deadline.call.cancel_requests',
      'deadline.call.cancel_confirmations',
    ]) {
      expect(points(found, name)).toEqual([]);
    }
  });

  it('a request without a budget of its own: the service default, as its source', async () => {
    const line = lineOf('orders');
    const res = await get('/none');
    expect(res.statusCode).toBe(200);
    await res.body.text();
    await line;
    expect(points(await collect(), 'deadline.request.budget')).toEqual([
      { attributes: { 'deadline.hop': 'orders', 'deadline.source': 'default' }, count: 1, sum: 2_000 },
    ]);
  });

  it('a request answered in time whose context runs out later (its signal held): not counted as exceeded', async () => {
    const line = lineOf('orders');
    const expired = expiry('orders', 200);
    const res = await get('/signal', 200);
    expect(res.statusCode).toBe(200);
    await res.body.text();
    await line;
    // The released context still runs out at its deadline, and says so on deadline:exceeded.
    await expired;
    const found = await collect();
    expect(points(found, 'deadline.expirations')).toEqual([]);
    expect(points(found, 'deadline.request.budget')).toEqual([
      { attributes: { 'deadline.hop': 'orders', 'deadline.source': 'header' }, count: 1, sum: 200 },
    ]);
  });

  it('a statement past the budget: exceeded by this hop, its cancel requested, then confirmed by PostgreSQL (57014)', async () => {
    const confirmed = confirmation();
    const line = lineOf('orders');
    const res = await get('/slow', 300);
    expect(res.statusCode).toBe(504);
    expect(res.headers['x-deadline-exceeded-by']).toBe('orders');
    await res.body.text();
    await Promise.all([confirmed, line]);
    const found = await collect();

    expect(found.get('deadline.expirations')?.descriptor).toMatchObject({ unit: '{expiration}', type: 'COUNTER' });
    // The request's deadline fired (in its handler), and cut the statement it was waiting for.
    expect(points(found, 'deadline.expirations')).toEqual(
      expect.arrayContaining([
        {
          attributes: { 'deadline.hop': 'orders', 'deadline.exceeded_by': 'orders', 'deadline.phase': 'in-handler' },
          value: 1,
        },
        {
          attributes: { 'deadline.hop': 'orders', 'deadline.exceeded_by': 'orders', 'deadline.phase': 'during-call' },
          value: 1,
        },
      ]),
    );
    expect(points(found, 'deadline.call.cancel_requests')).toEqual([
      {
        attributes: {
          'deadline.hop': 'orders',
          'deadline.target': 'postgres:test',
          'deadline.outcome': 'deadline_exceeded',
        },
        value: 1,
      },
    ]);
    expect(points(found, 'deadline.call.cancel_confirmations')).toEqual([
      {
        attributes: {
          'deadline.hop': 'orders',
          'deadline.target': 'postgres:test',
          'deadline.confirmed_by': 'postgres 57014',
        },
        value: 1,
      },
    ]);
    expect(points(found, 'deadline.request.budget')).toEqual([
      { attributes: { 'deadline.hop': 'orders', 'deadline.source': 'header' }, count: 1, sum: 300 },
    ]);
  });

  it('a gRPC call: its budget at arrival (core’s IncomingCall), from the request that made it or the default', async () => {
    const line = lineOf('orders');
    const res = await get('/quote', 600);
    expect(res.statusCode).toBe(200);
    await res.body.text();
    await line;
    let found = await collect();
    const [arrived] = points(found, 'deadline.request.budget').filter(
      (point) => point.attributes['deadline.hop'] === 'pricing',
    );
    expect(arrived).toMatchObject({ attributes: { 'deadline.hop': 'pricing', 'deadline.source': 'header' }, count: 1 });
    expect(arrived?.sum).toBeGreaterThan(0);
    expect(arrived?.sum).toBeLessThanOrEqual(600);
    expect(points(found, 'deadline.call.remaining_budget')).toEqual([
      {
        attributes: { 'deadline.hop': 'orders', 'deadline.target': '/deadline.test.Pricing/Quote' },
        count: 1,
        sum: expect.any(Number),
      },
    ]);

    // Outside any request, with no deadline of its own: the service's default.
    await quote(pricing);
    found = await collect();
    expect(points(found, 'deadline.request.budget')).toEqual([
      { attributes: { 'deadline.hop': 'pricing', 'deadline.source': 'default' }, count: 1, sum: 1_500 },
    ]);
    expect(points(found, 'deadline.call.remaining_budget')).toEqual([]);
  });

  it('admission refusals, by hop, route and reason', async () => {
    const refusal = { protocol: 'http', hop: 'orders', remainingMs: 120, neededMs: 300, queueMs: 200 };
    publishAdmissionRefused({ ...refusal, route: 'GET /stock/:sku', reason: 'overloaded' });
    publishAdmissionRefused({ ...refusal, route: 'GET /stock/:sku', reason: 'overloaded' });
    publishAdmissionRefused({ ...refusal, route: 'POST /orders', reason: 'too-little-time' });
    const found = await collect();
    expect(found.get('deadline.admission.refusals')?.descriptor).toMatchObject({ unit: '{refusal}', type: 'COUNTER' });
    expect(points(found, 'deadline.admission.refusals')).toEqual(
      expect.arrayContaining([
        {
          attributes: {
            'deadline.hop': 'orders',
            'deadline.route': 'GET /stock/:sku',
            'deadline.refusal_reason': 'overloaded',
          },
          value: 2,
        },
        {
          attributes: {
            'deadline.hop': 'orders',
            'deadline.route': 'POST /orders',
            'deadline.refusal_reason': 'too-little-time',
          },
          value: 1,
        },
      ]),
    );
  });

  it('the global meter provider by default; `target` names the calls', async () => {
    const global = testProvider();
    metrics.setGlobalMeterProvider(global.provider);
    const stopGlobal = recordDeadlineMetrics({
      target: (target) => (target.startsWith('GET ') ? 'inventory' : target),
    });
    try {
      const line = lineOf('orders');
      const res = await get('/order', 800);
      await res.body.text();
      await line;
      const calls = points(await global.collect(), 'deadline.call.remaining_budget');
      expect(calls.map((point) => point.attributes['deadline.target']).sort()).toEqual(['inventory', 'postgres:test']);
    } finally {
      stopGlobal();
      metrics.disable();
      await global.provider.shutdown();
    }
  });

  it('after stop(): no more points, and no subscriber left on any channel', async () => {
    stop();
    stop(); // twice: nothing more
    const lines = Promise.all([lineOf('orders'), lineOf('inventory')]);
    const ok = await get('/order', 800);
    await ok.body.text();
    await lines;
    const line = lineOf('orders');
    const slow = await get('/slow', 300);
    expect(slow.statusCode).toBe(504);
    await slow.body.text();
    // Its cut statement's cancel is requested before the answer; a confirmation would come to no one (checked below).
    await line;
    await quote(pricing);
    publishAdmissionRefused({
      protocol: 'http',
      hop: 'orders',
      route: 'GET /stock/:sku',
      reason: 'overloaded',
      remainingMs: 1,
      neededMs: 2,
      queueMs: 2,
    });

    const found = await collect();
    for (const name of [
      'deadline.request.budget',
      'deadline.call.remaining_budget',
      'deadline.expirations',
      'deadline.call.cancel_requests',
      'deadline.call.cancel_confirmations',
      'deadline.admission.refusals',
    ]) {
      expect(points(found, name), name).toEqual([]);
    }
    for (const channel of [
      REQUEST_END_CHANNEL,
      DiagnosticsChannel.IncomingStart,
      DiagnosticsChannel.CallStart,
      DiagnosticsChannel.Exceeded,
      DiagnosticsChannel.CallCancel,
      DiagnosticsChannel.AdmissionRefused,
    ]) {
      expect(diagnostics.channel(channel).hasSubscribers, channel).toBe(false);
    }
  });
});
