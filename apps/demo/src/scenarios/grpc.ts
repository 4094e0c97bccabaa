/**
 * 9. The budget crosses gRPC. A request with 300 ms left calls a gRPC service whose handler runs a 5 s query.
 * With grpc-js alone the call carries the deadline its caller hard-coded (4 s): the service is given 4 s, the caller
 * waits them all out long after its own client left, and the query runs to its end. With `@deadline/grpc` at both
 * ends the call carries what is left (less a margin), the handler's query is cancelled on PostgreSQL at that
 * deadline, and the error says whose deadline fired. Both servers and both clients are real grpc-js on loopback.
 */
import { DeadlineExceededError, findDeadlineError, runWithDeadline } from '@deadline/core';
import { deadlineService, withDeadline as withGrpcDeadline } from '@deadline/grpc';
import { withDeadline as withPg } from '@deadline/pg';
import grpc from '@grpc/grpc-js';
import type pg from 'pg';
import { until } from '../client.js';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';

const BUDGET_MS = 300;
const MARGIN_MS = 20;

/** One call: the statement to run (`pg_sleep`), tagged so the server's activity can be found. */
interface Hold {
  marker: string;
  sleepS: number;
}

const json = <T>() => ({
  serialize: (value: T) => Buffer.from(JSON.stringify(value)),
  deserialize: (bytes: Buffer) => JSON.parse(bytes.toString()) as T,
});

/** `stock.Stock/Hold`: holds a row for as long as the statement runs. JSON on the wire: no code generation. */
const STOCK: grpc.ServiceDefinition = {
  hold: {
    path: '/stock.Stock/Hold',
    requestStream: false,
    responseStream: false,
    requestSerialize: json<Hold>().serialize,
    requestDeserialize: json<Hold>().deserialize,
    responseSerialize: json<object>().serialize,
    responseDeserialize: json<object>().deserialize,
  },
};
const StockClient = grpc.makeGenericClientConstructor(STOCK, 'Stock');
type Stock = grpc.Client & {
  hold(request: Hold, options: grpc.CallOptions, callback: grpc.requestCallback<object>): void;
};

/** The stock service, bare or with the library; what each call's handler was given, by marker. */
async function serveStock(pool: pg.Pool, library: boolean) {
  const given = new Map<string, number>();
  const db: { query(sql: string): Promise<unknown> } = library ? withPg(pool, { marginMs: MARGIN_MS }) : pool;
  const handlers = {
    async hold(call: grpc.ServerUnaryCall<Hold, object>, callback: grpc.sendUnaryData<object>) {
      const deadline = call.getDeadline();
      given.set(call.request.marker, (deadline instanceof Date ? deadline.getTime() : deadline) - Date.now());
      try {
        await db.query(`SELECT pg_sleep(${call.request.sleepS}) /* ${call.request.marker} */`);
        callback(null, {});
      } catch (error) {
        callback(error as Error);
      }
    },
  };
  const server = new grpc.Server();
  server.addService(STOCK, library ? deadlineService(STOCK, handlers, { serviceName: 'stock' }) : handlers);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error === null ? resolve(bound) : reject(error),
    ),
  );
  const client = new StockClient(
    `127.0.0.1:${port}`,
    grpc.credentials.createInsecure(),
    library ? withGrpcDeadline({}, { marginMs: MARGIN_MS }) : {},
  ) as unknown as Stock;
  return {
    given,
    call: (request: Hold, options: grpc.CallOptions) =>
      new Promise<void>((resolve, reject) =>
        client.hold(request, options, (error) => (error === null ? resolve() : reject(error))),
      ),
    close: async () => {
      client.close();
      await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
    },
  };
}

/** What the caller got: the gRPC status, and whose deadline the library says fired. */
function answerOf(error: unknown): string {
  const code = (error as { code?: number } | undefined)?.code;
  const name = code === undefined ? 'OK' : (grpc.status[code] ?? String(code));
  const typed = findDeadlineError(error);
  return typed instanceof DeadlineExceededError ? `${name}, ${typed.whose}` : name;
}

export async function grpcHop(ctx: ScenarioContext): Promise<ScenarioTable> {
  const sleepS = ctx.quick ? 2 : 5;
  // The caller's own fixed deadline, as code without a budget writes it: longer than its client waits.
  const fixedMs = ctx.quick ? 1_500 : 4_000;
  const busy = async (marker: string) => {
    const { rows } = await ctx.env.monitor.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()",
      [`%${marker}%`],
    );
    return (rows[0] as { n: number }).n > 0;
  };
  const rows: ScenarioTable['rows'] = [];
  for (const library of [false, true]) {
    const stock = await serveStock(ctx.env.pool, library);
    try {
      const marker = `deadline_demo_grpc_${process.pid}_${Math.random().toString(36).slice(2)}`;
      const started = performance.now();
      const request = { marker, sleepS };
      const error = await runWithDeadline(BUDGET_MS, () =>
        stock.call(request, library ? {} : { deadline: Date.now() + fixedMs }),
      ).then(
        () => undefined,
        (e: unknown) => e,
      );
      const answered = performance.now() - started;
      await until(async () => !(await busy(marker)), sleepS * 1000 + 2_000);
      const statementEnded = performance.now() - started;
      rows.push([
        library ? '@deadline/grpc (both ends)' : `grpc-js, deadline: ${fixedMs / 1000} s`,
        Math.round(stock.given.get(marker) ?? Number.NaN),
        Math.round(answered),
        answerOf(error),
        Math.round(statementEnded),
        Math.max(0, Math.round(statementEnded - BUDGET_MS)),
      ]);
    } finally {
      await stock.close();
    }
  }
  return {
    id: 9,
    title: `The budget crosses gRPC: ${BUDGET_MS} ms left, a ${sleepS} s query behind a gRPC call`,
    columns: [
      'caller → stock service',
      'stock was given (ms)',
      'caller answered (ms)',
      'answer',
      'statement ended (ms)',
      `dead work after ${BUDGET_MS} ms (ms)`,
    ],
    rows,
    note:
      "Times from the call's start. Given: the deadline the handler read from grpc-timeout. With the library the call " +
      `carries ${BUDGET_MS} ms less ${MARGIN_MS} ms, and the handler's query (through @deadline/pg, margin ${MARGIN_MS} ms) ` +
      'is cancelled on PostgreSQL; the answer names whose deadline fired.',
  };
}
