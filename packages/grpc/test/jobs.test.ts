/**
 * Jobs from a gRPC handler behave as they do from an HTTP one: a BullMQ job enqueued inside the call carries the
 * call's trace, and not its deadline (the queue and the worker are real, on the Redis running here).
 */
import { currentContext, type DeadlineContext, runWithContext, traceFrom } from '@deadline/core';
import { enqueue, withJobContext } from '@deadline/jobs';
import grpc from '@grpc/grpc-js';
import { Queue, Worker } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDIS, requireService } from '../../../test/support/services.ts';
import { deadlineService } from '../src/index.ts';
import { client, Inventory, implementation, type Seen, seen, unary } from './support.ts';

const available = await requireService(REDIS);

describe.runIf(available)('a BullMQ job enqueued by a gRPC handler', () => {
  let queue: Queue;
  let worker: Worker;
  let server: grpc.Server;
  let address: string;
  let jobRan: (context: DeadlineContext | undefined) => void = () => {};
  const jobContext = new Promise<DeadlineContext | undefined>((resolve) => {
    jobRan = resolve;
  });

  beforeAll(async () => {
    const { hostname, port } = new URL(REDIS.url);
    const connection = { host: hostname, port: Number(port || 6379), maxRetriesPerRequest: null };
    queue = new Queue(`deadline-grpc-test-${process.pid}`, { connection });
    worker = new Worker(
      queue.name,
      withJobContext(async () => jobRan(currentContext())),
      { connection },
    );
    worker.on('error', () => {});
    await queue.waitUntilReady();
    server = new grpc.Server();
    const handlers = {
      ...implementation(),
      inspect(_call: grpc.ServerUnaryCall<unknown, Seen>, callback: grpc.sendUnaryData<Seen>) {
        enqueue(queue, 'audit', { sku: 'A1' }).then(
          () => callback(null, seen()),
          (error: Error) => callback(error),
        );
      },
    };
    server.addService(
      Inventory.service,
      deadlineService(Inventory.service, handlers, { serviceName: 'inventory' }) as grpc.UntypedServiceImplementation,
    );
    const bound = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, p) =>
        error === null ? resolve(p) : reject(error),
      ),
    );
    address = `127.0.0.1:${bound}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => (server ? server.tryShutdown(() => resolve()) : resolve()));
    await worker?.close();
    await queue?.obliterate({ force: true }).catch(() => {});
    await queue?.close();
  });

  it("carries the call's trace and not its deadline", async () => {
    const c = client(address);
    const trace = traceFrom();
    const answered = await runWithContext({ deadline: 3_000, trace }, () => unary<Seen>(c, 'inspect', {}));
    expect(answered.traceId).toBe(trace.traceId);
    expect(answered.budgetMs).toBeLessThanOrEqual(3_000);
    const job = await jobContext;
    expect(job?.trace?.traceId).toBe(trace.traceId);
    // The job runs under its own budget (none was given to enqueue): the call's 3 s do not bound it.
    expect(job?.deadline.isNone).toBe(true);
    c.close();
  });
});
