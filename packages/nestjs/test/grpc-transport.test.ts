/**
 * Nest's gRPC transport with the module: the handler runs inside the call's deadline (`grpc-timeout`, read by
 * grpc-js) and trace, is cut at a `@Deadline()` of its own with its PostgreSQL statement cancelled, and the answer is
 * `DEADLINE_EXCEEDED` naming this hop in `x-deadline-exceeded-by` — to a Nest client whose channel `@deadline/grpc`
 * bounds, and to Python's grpcio, a client no one here wrote.
 */
import 'reflect-metadata';
import { currentContext, runWithContext, traceFrom } from '@deadline/core';
import { withDeadline as grpcWithDeadline } from '@deadline/grpc';
import { withDeadline as withPgDeadline } from '@deadline/pg';
import type { Metadata } from '@grpc/grpc-js';
import { Controller, type INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { type ClientGrpc, ClientProxyFactory, GrpcMethod, Transport } from '@nestjs/microservices';
import pg from 'pg';
import { firstValueFrom, type Observable } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grpcio, PYTHON_GRPCIO, requireForeignClients } from '../../../test/support/foreign-clients.ts';
import { freePort } from '../../../test/support/free-port.ts';
import { queryRequest } from '../../../test/support/grpc-wire.ts';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { marker, ServerActivity } from '../../pg/test/support/activity.ts';
import type { LogLine } from '../../server/test/harness.ts';
import { Deadline, DeadlineModule } from '../src/index.ts';
import { MemoryLogger } from './harness.ts';

const available = (await requireService(POSTGRES)) && (await requireForeignClients(PYTHON_GRPCIO));

const PROTO = new URL('../../../test/fixtures/inventory.proto', import.meta.url).pathname;
const TRACE = traceFrom('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
const ERROR = 50;
const WARN = 40;

let db: ReturnType<typeof withPgDeadline<pg.Pool>>;

interface Seen {
  budgetMs: number;
  remainingMs: number;
  hop: string;
  traceId: string;
}

interface Inventory {
  inspect(request: object, metadata?: Metadata): Observable<Seen>;
  query(request: { sql: string }): Observable<{ count: number }>;
}

@Controller()
class InventoryController {
  @GrpcMethod('Inventory', 'Inspect')
  inspect(): Seen {
    const context = currentContext();
    return {
      budgetMs: context?.deadline.budgetMs ?? 0,
      remainingMs: context?.remainingMs() ?? 0,
      hop: context?.hop ?? '',
      traceId: context?.trace?.traceId ?? '',
    };
  }

  @GrpcMethod('Inventory', 'Query')
  @Deadline({ maxMs: 300 })
  async query(request: { sql: string }): Promise<{ count: number }> {
    const result = await db.query(request.sql);
    return { count: result.rowCount ?? 0 };
  }
}

@Module({
  imports: [DeadlineModule.forRoot({ serviceName: 'stock', defaultMs: 10_000 })],
  controllers: [InventoryController],
})
class InventoryModule {}

describe.runIf(available)('nestjs gRPC transport', () => {
  const logs: LogLine[] = [];
  let activity: ServerActivity;
  let server: INestMicroservice;
  let client: ClientGrpc & { close(): unknown };
  let inventory: Inventory;
  let address: string;
  const errorLines = () => logs.filter((line) => line.level >= ERROR);

  beforeAll(async () => {
    db = withPgDeadline(new pg.Pool({ connectionString: POSTGRES.url, max: 2 }), { name: 'stock-db' });
    activity = await ServerActivity.open();
    address = `127.0.0.1:${await freePort()}`;
    const options = { package: 'deadline.test', protoPath: PROTO, url: address };
    server = await NestFactory.createMicroservice(InventoryModule, {
      transport: Transport.GRPC,
      options,
      logger: new MemoryLogger(logs),
    });
    await server.listen();
    client = ClientProxyFactory.create({
      transport: Transport.GRPC,
      options: { ...options, channelOptions: grpcWithDeadline({}, { marginMs: 10 }) },
    }) as unknown as ClientGrpc & { close(): unknown };
    inventory = client.getService<Inventory>('Inventory');
  });
  afterAll(async () => {
    client?.close();
    await server?.close();
    await activity?.end();
    await db?.end();
  });

  it('the handler runs inside the call’s deadline and trace, sent by a client @deadline/grpc bounds', async () => {
    const seen = await runWithContext({ deadline: 1_500, hop: 'gateway', trace: TRACE }, () =>
      firstValueFrom(inventory.inspect({})),
    );
    expect(seen.hop).toBe('stock');
    expect(seen.budgetMs).toBeLessThanOrEqual(1_500 - 10 - 20);
    expect(seen.budgetMs).toBeGreaterThan(1_000);
    expect(seen.traceId).toBe(TRACE.traceId);
  });

  it('a handler past its @Deadline(): DEADLINE_EXCEEDED naming this hop, its statement gone, one line at warn', async () => {
    const statement = marker();
    const started = performance.now();
    const failure = (await firstValueFrom(inventory.query({ sql: `select pg_sleep(5) /* ${statement} */` })).catch(
      (error: unknown) => error,
    )) as { code: number; metadata: Metadata };
    expect(failure.code).toBe(4);
    expect(failure.metadata.get('x-deadline-exceeded-by')).toEqual(['stock']);
    const goneAt = await activity.goneAt(statement);
    expect(goneAt - started).toBeGreaterThanOrEqual(250);
    expect(goneAt - started).toBeLessThan(2_500);
    const line = logs.find((l) => l.method === '/deadline.test.Inventory/Query' && l.outcome === 'deadline_exceeded');
    expect(line).toMatchObject({ level: WARN, hop: 'stock', code: 4, exceededBy: 'stock' });
    expect(errorLines()).toEqual([]);
  });

  it('Python’s grpcio, a client no one here wrote, gets the handler’s deadline as DEADLINE_EXCEEDED naming this hop', async () => {
    // Its own 2 s timeout is far off: the handler's 300 ms @Deadline() is what fires, on any machine.
    const statement = marker();
    const sql = `select pg_sleep(5) /* ${statement} */`;
    const answer = await grpcio(address, '/deadline.test.Inventory/Query', queryRequest(sql), 2);
    expect(answer.code).toBe('DEADLINE_EXCEEDED');
    expect(answer.trailers['x-deadline-exceeded-by']).toBe('stock');
    expect(answer.elapsedMs).toBeLessThan(1_900);
    await activity.goneAt(statement);
    expect(errorLines()).toEqual([]);
  });
});
