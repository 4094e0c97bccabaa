/**
 * Admission at a Connect server (`deadlineInterceptor` with `admission`, connect-node on `node:http2`), under clients
 * no one here wrote, calling a server whose loop is kept busy: curl over the Connect protocol gets a 503
 * (`unavailable`) with `Retry-After` and the refusing hop in `x-deadline-refused-by`; Python's grpcio over gRPC gets
 * `UNAVAILABLE` with `grpc-retry-pushback-ms`; the handler never runs. A call with less left than its method's fastest
 * typical time gets this hop's `deadline_exceeded`; an idle server refuses nothing; streaming calls are never judged.
 */
import diagnostics from 'node:diagnostics_channel';
import { once } from 'node:events';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { Code, type ConnectError, type ConnectRouter, type HandlerContext } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { type AdmissionRefusedMessage, DiagnosticsChannel } from '@deadline/core';
import { loopDelayMs } from '@deadline/core/internal';
import { DEADLINE_EXCEEDED_BY_HEADER } from '@deadline/core/wire';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keepLoopBusy } from '../../../test/support/busy-loop.ts';
import { CURL, curl, grpcio, PYTHON_GRPCIO, requireForeignClients } from '../../../test/support/foreign-clients.ts';
import { inspectRequest } from '../../../test/support/grpc-wire.ts';
import { untilTrue } from '../../../test/support/turns.ts';
import { deadlineInterceptor } from '../src/index.ts';
import { client, Inventory } from './support.ts';

const available = await requireForeignClients(PYTHON_GRPCIO, CURL);

const HOP = 'admitting';
const INSPECT = '/deadline.test.Inventory/Inspect';
/** How long each Inspect call takes: what the method learns. */
const WORK_MS = 50;

describe.runIf(available)('admission at a Connect server', () => {
  let server: http2.Http2Server;
  let baseUrl: string;
  let plain: ReturnType<typeof client>;
  let runs = 0;
  let ticks = 0;
  const held: (() => void)[] = [];
  const lines: { level: string; line: Record<string, unknown> }[] = [];
  const refusals: AdmissionRefusedMessage[] = [];
  const onRefused = (message: unknown) => refusals.push(message as AdmissionRefusedMessage);
  const sessions = new Set<http2.ServerHttp2Session>();

  beforeAll(async () => {
    const routes = (router: ConnectRouter) => {
      router.service(Inventory, {
        async inspect(req: { wait: boolean }) {
          runs++;
          await new Promise<void>((resolve) => {
            if (req.wait) held.push(resolve);
            else setTimeout(resolve, WORK_MS);
          });
          return {};
        },
        async query() {
          return { count: 0 };
        },
        async *ticks(_req: object, _ctx: HandlerContext) {
          ticks++;
          yield { n: 1 };
        },
        async collect() {
          return {};
        },
      } as never);
    };
    const logger = {
      info: (line: object) => lines.push({ level: 'info', line: line as never }),
      warn: (line: object) => lines.push({ level: 'warn', line: line as never }),
    };
    server = http2.createServer(
      connectNodeAdapter({
        routes,
        interceptors: [deadlineInterceptor({ serviceName: HOP, admission: true, logger })],
      }),
    );
    server.on('session', (session) => {
      sessions.add(session);
      session.once('close', () => sessions.delete(session));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    plain = client(baseUrl, 'connect', false);
    diagnostics.subscribe(DiagnosticsChannel.AdmissionRefused, onRefused);
    // The method learns its time from calls answered with time to spare.
    for (let i = 0; i < 30; i++) await plain.inspect({}, { timeoutMs: 5_000 });
  });

  afterAll(async () => {
    diagnostics.unsubscribe(DiagnosticsChannel.AdmissionRefused, onRefused);
    for (const release of held) release();
    await new Promise<void>((resolve) => {
      if (server === undefined) return resolve();
      server.close(() => resolve());
      for (const session of sessions) session.destroy();
    });
  });

  it('an idle server refuses nothing: 20 calls one after another, 1 s each', async () => {
    const before = { runs, refusals: refusals.length };
    for (let i = 0; i < 20; i++) await plain.inspect({}, { timeoutMs: 1_000 });
    expect(runs - before.runs).toBe(20);
    expect(refusals.length).toBe(before.refusals);
  });

  it('curl over the Connect protocol and grpcio over gRPC, on a loaded server: unavailable, when to retry, the hop', async () => {
    const before = { runs, ticks, refusals: refusals.length, lines: lines.length };
    const busy = keepLoopBusy(100);
    try {
      await untilTrue(() => loopDelayMs() >= 10);
      // 100 ms left: more than the method's fastest (50 ms), less than the loop's queue (~80 ms) plus its time.
      const headers = {
        'content-type': 'application/proto',
        'connect-protocol-version': '1',
        'x-request-deadline': '100',
      };
      const overConnect = await curl(`${baseUrl}${INSPECT}`, headers, inspectRequest());
      expect(overConnect.status).toBe(503);
      expect(overConnect.headers['x-deadline-refused-by']).toBe(HOP);
      expect(Number(overConnect.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect(JSON.parse(overConnect.body.toString('utf8'))).toMatchObject({
        code: 'unavailable',
        message: expect.stringContaining(`${HOP} is overloaded`),
      });
      const overGrpc = await grpcio(baseUrl.slice('http://'.length), INSPECT, inspectRequest(), 10, {
        'x-request-deadline': '100',
      });
      expect(overGrpc).toMatchObject({ code: 'UNAVAILABLE' });
      expect(overGrpc.trailers['x-deadline-refused-by']).toBe(HOP);
      expect(Number(overGrpc.trailers['grpc-retry-pushback-ms'])).toBeGreaterThanOrEqual(10);
      // A streaming call is never judged: its time is the stream's, not an answer's.
      const streamed: unknown[] = [];
      for await (const tick of plain.ticks({ count: 1, intervalMs: 1 }, { timeoutMs: 5_000 })) streamed.push(tick);
      expect(streamed).toHaveLength(1);
    } finally {
      busy.stop();
    }
    expect(runs).toBe(before.runs);
    expect(ticks).toBe(before.ticks + 1);
    const published = refusals.slice(before.refusals);
    expect(published).toHaveLength(2);
    for (const message of published) {
      expect(message).toMatchObject({ protocol: 'connect', hop: HOP, route: INSPECT, reason: 'overloaded' });
    }
    const refusedLines = lines.slice(before.lines).filter(({ line }) => line.outcome === 'refused');
    expect(refusedLines).toEqual([
      { level: 'info', line: expect.objectContaining({ method: INSPECT, refused: 'overloaded', code: 'Unavailable' }) },
      { level: 'info', line: expect.objectContaining({ method: INSPECT, refused: 'overloaded', code: 'Unavailable' }) },
    ]);
  });

  it("less left than the method's fastest typical time: this hop's deadline_exceeded, its handler never run", async () => {
    // One call in flight: the method's estimate is not being tested by a probe.
    const first = plain.inspect({ wait: true }, { timeoutMs: 5_000 });
    await untilTrue(() => held.length === 1);
    const before = runs;
    const refused = (await plain
      .inspect({}, { timeoutMs: 5_000, headers: { 'x-request-deadline': '25' } })
      .then(() => undefined)
      .catch((error: unknown) => error)) as ConnectError | undefined;
    expect(refused?.code).toBe(Code.DeadlineExceeded);
    expect(refused?.rawMessage).toMatch(/not started: 2\d ms left, and its calls take at least \d+ ms/);
    expect(refused?.metadata.get(DEADLINE_EXCEEDED_BY_HEADER)).toBe(HOP);
    expect(runs).toBe(before);
    for (const release of held.splice(0)) release();
    await first;
    expect(refusals.at(-1)).toMatchObject({ protocol: 'connect', route: INSPECT, reason: 'too-little-time' });
  });
});
