/**
 * Admission at a grpc-js server (`deadlineService` with `admission`), under a client no one here wrote: Python's
 * grpcio, calling a server whose loop is kept busy, gets `UNAVAILABLE` with `grpc-retry-pushback-ms` and the refusing
 * hop in `x-deadline-refused-by`, and the handler never runs; a call with less left than its method's fastest typical
 * time gets this hop's `DEADLINE_EXCEEDED`; an idle server refuses nothing. Each refused call is published on
 * `deadline:admission:refused` and logged `refused`, at info.
 */
import diagnostics from 'node:diagnostics_channel';
import { type AdmissionRefusedMessage, DiagnosticsChannel } from '@deadline/core';
import { loopDelayMs } from '@deadline/core/internal';
import { DEADLINE_EXCEEDED_BY_HEADER } from '@deadline/core/wire';
import grpc, { type ServiceError, status as Status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keepLoopBusy } from '../../../test/support/busy-loop.ts';
import { grpcio, PYTHON_GRPCIO, requireForeignClients } from '../../../test/support/foreign-clients.ts';
import { inspectRequest } from '../../../test/support/grpc-wire.ts';
import { untilTrue } from '../../../test/support/turns.ts';
import { deadlineService } from '../src/index.ts';
import { client, Inventory, type InventoryClient, unary } from './support.ts';

const available = await requireForeignClients(PYTHON_GRPCIO);

const HOP = 'admitting';
const INSPECT = '/deadline.test.Inventory/Inspect';
/** How long each Inspect call takes: what the method learns. */
const WORK_MS = 50;

type Callback = (error: unknown, value?: unknown) => void;

describe.runIf(available)('admission at a grpc-js server', () => {
  let server: grpc.Server;
  let address: string;
  let plain: InventoryClient;
  let runs = 0;
  const held: (() => void)[] = [];
  const lines: { level: string; line: Record<string, unknown> }[] = [];
  const refusals: AdmissionRefusedMessage[] = [];
  const onRefused = (message: unknown) => refusals.push(message as AdmissionRefusedMessage);

  beforeAll(async () => {
    server = new grpc.Server();
    const implementation = {
      inspect(call: grpc.ServerUnaryCall<{ wait: boolean }, object>, callback: Callback) {
        runs++;
        if (call.request.wait) held.push(() => callback(null, {}));
        else setTimeout(() => callback(null, {}), WORK_MS);
      },
      query: (_call: unknown, callback: Callback) => callback(null, { count: 0 }),
      ticks: (call: grpc.ServerWritableStream<unknown, unknown>) => call.end(),
      collect: (_call: unknown, callback: Callback) => callback(null, {}),
    };
    const logger = {
      info: (line: object) => lines.push({ level: 'info', line: line as never }),
      warn: (line: object) => lines.push({ level: 'warn', line: line as never }),
    };
    server.addService(
      Inventory.service,
      deadlineService(Inventory.service, implementation, {
        serviceName: HOP,
        admission: true,
        logger,
      }) as grpc.UntypedServiceImplementation,
    );
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, bound) =>
        error === null ? resolve(bound) : reject(error),
      ),
    );
    address = `127.0.0.1:${port}`;
    plain = client(address, false);
    diagnostics.subscribe(DiagnosticsChannel.AdmissionRefused, onRefused);
    // The method learns its time from calls answered with time to spare.
    for (let i = 0; i < 30; i++) await unary(plain, 'inspect', {}, { deadline: Date.now() + 5_000 });
  });

  afterAll(async () => {
    diagnostics.unsubscribe(DiagnosticsChannel.AdmissionRefused, onRefused);
    for (const release of held) release();
    plain?.close();
    await new Promise<void>((resolve) => (server ? server.tryShutdown(() => resolve()) : resolve()));
  });

  it('an idle server refuses nothing: 20 calls one after another, 1 s each', async () => {
    const before = { runs, refusals: refusals.length };
    for (let i = 0; i < 20; i++) await unary(plain, 'inspect', {}, { deadline: Date.now() + 1_000 });
    expect(runs - before.runs).toBe(20);
    expect(refusals.length).toBe(before.refusals);
  });

  it("Python's grpcio, on a loaded server: UNAVAILABLE with grpc-retry-pushback-ms and the hop, its handler never run", async () => {
    const before = { runs, refusals: refusals.length, lines: lines.length };
    const busy = keepLoopBusy(100);
    try {
      await untilTrue(() => loopDelayMs() >= 10);
      // 100 ms left: more than the method's fastest (50 ms), less than the loop's queue (~80 ms) plus its time.
      const answer = await grpcio(address, INSPECT, inspectRequest(), 10, { 'x-request-deadline': '100' });
      expect(answer).toMatchObject({ code: 'UNAVAILABLE', details: expect.stringContaining(`${HOP} is overloaded`) });
      expect(answer.trailers['x-deadline-refused-by']).toBe(HOP);
      expect(Number(answer.trailers['grpc-retry-pushback-ms'])).toBeGreaterThanOrEqual(10);
    } finally {
      busy.stop();
    }
    expect(runs).toBe(before.runs);
    expect(refusals.slice(before.refusals)).toEqual([
      expect.objectContaining({ protocol: 'grpc', hop: HOP, route: INSPECT, reason: 'overloaded', remainingMs: 100 }),
    ]);
    expect(lines.slice(before.lines)).toEqual([
      {
        level: 'info',
        line: expect.objectContaining({
          method: INSPECT,
          outcome: 'refused',
          refused: 'overloaded',
          code: Status.UNAVAILABLE,
        }),
      },
    ]);
  });

  it("less left than the method's fastest typical time: this hop's DEADLINE_EXCEEDED, its handler never run", async () => {
    // One call in flight: the method's estimate is not being tested by a probe.
    const first = unary(plain, 'inspect', { wait: true }, { deadline: Date.now() + 5_000 });
    await untilTrue(() => held.length === 1);
    const before = runs;
    const refused = await unary(plain, 'inspect', {}, { deadline: Date.now() + 5_000 }, { 'x-request-deadline': '25' })
      .then(() => undefined)
      .catch((error: ServiceError) => error);
    expect(refused).toMatchObject({ code: Status.DEADLINE_EXCEEDED });
    expect(refused?.details).toMatch(/not started: 2\d ms left, and its calls take at least \d+ ms/);
    expect(refused?.metadata.get(DEADLINE_EXCEEDED_BY_HEADER)).toEqual([HOP]);
    expect(runs).toBe(before);
    for (const release of held.splice(0)) release();
    await first;
    expect(refusals.at(-1)).toMatchObject({ protocol: 'grpc', route: INSPECT, reason: 'too-little-time' });
  });
});
