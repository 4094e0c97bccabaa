/**
 * A Connect server (connect-node on `node:http2`), built as the guide says, under clients no one here wrote: Python's
 * grpcio over the gRPC protocol; curl over the Connect protocol, gRPC-Web and gRPC; nghttp; and a bare HTTP/2 client
 * sending `grpc-timeout` values no gRPC library would. Our own clients cannot show what these do: a Connect-ES client's
 * own timer fires first and the server's answer is never read. The caller's own timeout is answered
 * `deadline_exceeded` naming this hop, whether or not a clamp applied — Connect's own timer aborting the handler's
 * signal is that deadline, not the caller leaving — and the handler's statement is gone from pg_stat_activity. A
 * timeout of 0 is expired; one longer than a timer can hold (which Connect's own timer misfires on) runs to `maxMs`.
 */
import { once } from 'node:events';
import { CancelledError, DeadlineExceededError, findDeadlineError } from '@deadline/core';
import { withDeadline as pgWithDeadline } from '@deadline/pg';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CURL,
  curl,
  grpcio,
  NGHTTP,
  nghttp,
  PYTHON_GRPCIO,
  requireForeignClients,
} from '../../../test/support/foreign-clients.ts';
import { grpcFrame, grpcWebTrailers, inspectRequest, queryRequest } from '../../../test/support/grpc-wire.ts';
import { HostileTimeouts, ZERO_TIMEOUTS } from '../../../test/support/hostile-timeouts.ts';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { CallLines, type CutOff, cutOffStatement } from '../../../test/support/statement-cut-off.ts';
import { ServerActivity } from '../../pg/test/support/activity.ts';
import { type Watched, watchingTheLoop } from '../../server/test/loop-lateness.ts';
import { events, type Served, serve } from './support.ts';

const available = (await requireService(POSTGRES)) && (await requireForeignClients(PYTHON_GRPCIO, CURL, NGHTTP));

const QUERY = '/deadline.test.Inventory/Query';
const INSPECT = '/deadline.test.Inventory/Inspect';
const MAX_MS = 1_500;
/** The Connect protocol's unary call, in binary: the message as the body, the protocol's version header. */
const CONNECT_UNARY = { 'content-type': 'application/proto', 'connect-protocol-version': '1' };
const GRPC_300MS = { 'content-type': 'application/grpc', te: 'trailers', 'grpc-timeout': '300m' };
/**
 * How late the event loop may run and a caller's reset at its own deadline still be read as that deadline for sure.
 * The server anchors the caller's relative timeout when it gets to the call: a loop that late sees a caller whose own
 * timer fires (grpcio's) reset the call that much before its copy of the deadline. The library reads a reset within
 * 100 ms of it as the deadline (core's `AT_THE_DEADLINE_MS`); half of that is sure.
 */
const SURELY_ON_TIME_MS = 50;

/** A test's `annotate`, as vitest gives it. */
type Annotate = (message: string) => Promise<unknown>;

describe.runIf(available)('a Connect server under clients in other languages', () => {
  let pool: pg.Pool;
  let activity: ServerActivity;
  let inventory: Served;
  const lines = new CallLines();

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2, application_name: `deadline-connect-${process.pid}` });
    activity = await ServerActivity.open();
    const db = pgWithDeadline(pool, { name: 'inventory-db' });
    inventory = await serve(
      {
        serviceName: 'inventory',
        defaultMs: 1_000,
        maxMs: MAX_MS,
        trust: (req) => req.header.get('x-internal') === '1',
        logger: lines.logger,
      },
      (sql) => db.query(sql),
    );
  });
  afterAll(async () => {
    await inventory?.close();
    await activity?.end();
    await pool?.end();
  });

  /**
   * The server's side of a call cut off by the caller's own timeout (`afterMs` in all): the handler's query failed
   * with this hop's deadline, the line says so, and the statement was gone soon after. So on any machine whose event
   * loop ran on time; one that ran later than {@link SURELY_ON_TIME_MS} may have seen a caller's own reset come far
   * enough ahead of its copy of the deadline to read it as the caller leaving: the work stopped all the same. The time
   * the call was sent is read by this loop too, so the statement's earliest end moves by its lateness.
   */
  async function expectCutOffHere(
    { value: cut, worstMs }: Watched<CutOff<unknown>>,
    annotate: Annotate,
    afterMs = 300,
  ): Promise<void> {
    const typed = findDeadlineError(cut.error);
    if (worstMs <= SURELY_ON_TIME_MS || !(typed instanceof CancelledError)) {
      expect(typed).toBeInstanceOf(DeadlineExceededError);
      expect((typed as DeadlineExceededError).target).toBe('inventory-db');
      expect(cut.line).toMatchObject({
        outcome: 'deadline_exceeded',
        code: 'DeadlineExceeded',
        exceededBy: 'inventory',
      });
    } else {
      expect(typed).toMatchObject({ reason: 'client-disconnected' });
      expect(cut.line).toMatchObject({ outcome: 'cancelled' });
    }
    expect(cut.goneAfterMs).toBeGreaterThan(afterMs - 100 - worstMs);
    expect(cut.goneAfterMs).toBeLessThan(afterMs + 1_700);
    await annotate(
      `event loop ${Math.round(worstMs)} ms late at worst; the server read the cut as ${cut.line.outcome}`,
    );
  }

  const url = (path: string) => `${inventory.baseUrl}${path}`;
  const address = () => inventory.baseUrl.slice('http://'.length);

  it("Python's grpcio, timeout=0.3: DEADLINE_EXCEEDED, and the handler's statement is cut off", async ({
    annotate,
  }) => {
    const watched = await watchingTheLoop(() =>
      cutOffStatement(activity, lines, (sql) => grpcio(address(), QUERY, queryRequest(sql), 0.3)),
    );
    await expectCutOffHere(watched, annotate);
    const cut = watched.value;
    expect(cut.answer.code).toBe('DEADLINE_EXCEEDED');
    // Answered at the deadline, by the server or by grpcio's own timer: no sooner than the server's timers, which
    // a late loop's clock fires early.
    expect(cut.answer.elapsedMs).toBeGreaterThan(250 - watched.worstMs);
    expect(cut.answer.elapsedMs).toBeLessThan(2_000);
    await annotate(
      `grpcio: ${cut.answer.code} "${cut.answer.details}" (trailer: ${cut.answer.trailers['x-deadline-exceeded-by'] ?? 'none'}) ` +
        `after ${Math.round(cut.answer.elapsedMs)} ms; statement gone ${Math.round(cut.goneAfterMs)} ms after the call left`,
    );
  });

  it('curl, Connect-Timeout-Ms: 300: 504 deadline_exceeded naming this hop', async ({ annotate }) => {
    const watched = await watchingTheLoop(() =>
      cutOffStatement(activity, lines, (sql) =>
        curl(url(QUERY), { ...CONNECT_UNARY, 'connect-timeout-ms': '300' }, queryRequest(sql)),
      ),
    );
    await expectCutOffHere(watched, annotate);
    const cut = watched.value;
    expect(cut.answer.status).toBe(504);
    expect(cut.answer.headers['x-deadline-exceeded-by']).toBe('inventory');
    expect(JSON.parse(cut.answer.body.toString())).toMatchObject({ code: 'deadline_exceeded' });
    await annotate(
      `curl, Connect: ${cut.answer.status} ${cut.answer.body} after ${Math.round(cut.answer.timeMs)} ms; ` +
        `statement gone ${Math.round(cut.goneAfterMs)} ms after the call left`,
    );
  });

  it('curl, Connect-Timeout-Ms: 0: deadline_exceeded at once, the handler not run', async ({ annotate }) => {
    let handled = 0;
    const onInspect = () => handled++;
    events.on('inspect', onInspect);
    try {
      const line = lines.after(lines.lines.length);
      const answer = await curl(url(INSPECT), { ...CONNECT_UNARY, 'connect-timeout-ms': '0' }, inspectRequest());
      expect(answer.status).toBe(504);
      expect(answer.headers['x-deadline-exceeded-by']).toBe('inventory');
      expect(JSON.parse(answer.body.toString())).toMatchObject({ code: 'deadline_exceeded' });
      expect(answer.timeMs).toBeLessThan(1_000);
      expect(await line).toMatchObject({ outcome: 'deadline_exceeded', budgetMs: 0 });
      expect(handled).toBe(0);
      await annotate(`curl, Connect, 0: ${answer.status} after ${Math.round(answer.timeMs)} ms, handler not run`);
    } finally {
      events.off('inspect', onInspect);
    }
  });

  it('curl, Connect-Timeout-Ms: 9999999999: clamped to maxMs and run that long, no early canceled', async ({
    annotate,
  }) => {
    // Connect's own timer misfires at once on it (Node prints its TimeoutOverflowWarning); that abort is ignored.
    const warned = once(process, 'warning');
    const watched = await watchingTheLoop(() =>
      cutOffStatement(activity, lines, (sql) =>
        curl(
          url(QUERY),
          { ...CONNECT_UNARY, 'connect-timeout-ms': '9999999999', 'x-internal': '1' },
          queryRequest(sql),
        ),
      ),
    );
    await expectCutOffHere(watched, annotate, MAX_MS);
    const cut = watched.value;
    expect(cut.line).toMatchObject({ budgetMs: MAX_MS, requestedMs: 9_999_999_999 });
    expect(cut.answer.status).toBe(504);
    expect(cut.answer.headers['x-deadline-exceeded-by']).toBe('inventory');
    expect(cut.answer.timeMs).toBeGreaterThan(MAX_MS - 50);
    expect(((await warned)[0] as Error).name).toBe('TimeoutOverflowWarning');
    await annotate(
      `curl, Connect, 9999999999: ${cut.answer.status} after ${Math.round(cut.answer.timeMs)} ms ` +
        `(maxMs ${MAX_MS}); statement gone ${Math.round(cut.goneAfterMs)} ms after the call left`,
    );
  });

  it('curl, gRPC-Web, grpc-timeout: 300m: grpc-status 4 with the trailer naming this hop', async ({ annotate }) => {
    const watched = await watchingTheLoop(() =>
      cutOffStatement(activity, lines, (sql) =>
        curl(
          url(QUERY),
          { 'content-type': 'application/grpc-web+proto', 'x-grpc-web': '1', 'grpc-timeout': '300m' },
          grpcFrame(queryRequest(sql)),
        ),
      ),
    );
    await expectCutOffHere(watched, annotate);
    const cut = watched.value;
    expect(cut.answer.status).toBe(200);
    const trailers = { ...cut.answer.headers, ...grpcWebTrailers(cut.answer.body) };
    expect(trailers).toMatchObject({ 'grpc-status': '4', 'x-deadline-exceeded-by': 'inventory' });
    await annotate(
      `curl, gRPC-Web: grpc-status ${trailers['grpc-status']}, x-deadline-exceeded-by ` +
        `${trailers['x-deadline-exceeded-by']} after ${Math.round(cut.answer.timeMs)} ms; ` +
        `statement gone ${Math.round(cut.goneAfterMs)} ms after the call left`,
    );
  });

  it('curl, gRPC, grpc-timeout: 300m: grpc-status 4 with the trailer naming this hop', async ({ annotate }) => {
    const watched = await watchingTheLoop(() =>
      cutOffStatement(activity, lines, (sql) => curl(url(QUERY), GRPC_300MS, grpcFrame(queryRequest(sql)))),
    );
    await expectCutOffHere(watched, annotate);
    const cut = watched.value;
    expect(cut.answer.status).toBe(200);
    expect(cut.answer.grpc).toMatchObject({ status: '4', exceededBy: 'inventory' });
    await annotate(
      `curl, gRPC: grpc-status ${cut.answer.grpc.status}, x-deadline-exceeded-by ${cut.answer.grpc.exceededBy} ` +
        `after ${Math.round(cut.answer.timeMs)} ms; statement gone ${Math.round(cut.goneAfterMs)} ms after the call left`,
    );
  });

  it('nghttp, gRPC, grpc-timeout: 300m: the same, read frame by frame', async ({ annotate }) => {
    const watched = await watchingTheLoop(() =>
      cutOffStatement(activity, lines, (sql) => nghttp(url(QUERY), GRPC_300MS, grpcFrame(queryRequest(sql)))),
    );
    await expectCutOffHere(watched, annotate);
    const cut = watched.value;
    expect(cut.answer.headers[':status']).toBe('200');
    expect(cut.answer.grpc).toMatchObject({ status: '4', exceededBy: 'inventory' });
    await annotate(
      `nghttp, gRPC: grpc-status ${cut.answer.grpc.status}, x-deadline-exceeded-by ${cut.answer.grpc.exceededBy}; ` +
        `statement gone ${Math.round(cut.goneAfterMs)} ms after the call left`,
    );
  });

  describe('hostile grpc-timeout values from a bare HTTP/2 client', () => {
    // Connect refuses a value it cannot read before the interceptor runs, with invalid_argument (3).
    const hostile = new HostileTimeouts(() => inventory.baseUrl, lines, events, '3');
    beforeAll(() => hostile.start());
    afterAll(() => hostile.stop());
    const send = (value: string | string[]) => hostile.send(value);

    it('zero of any unit: refused at once, deadline_exceeded naming this hop, the handler not run', async () => {
      for (const value of ZERO_TIMEOUTS) await hostile.expectRefused(value, 'inventory');
    });

    it("more than 2^31−1 ms, which Connect's own timer misfires on: runs, clamped to maxMs", async () => {
      for (const value of ['99999999H', '99999999S', '2147484S', '597H', '99999999M', '2147483S']) {
        const { answer, ran, line } = await send(value);
        expect({ value, status: answer.grpcStatus, ran }).toEqual({ value, status: '0', ran: true });
        expect(line, value).toMatchObject({ outcome: 'ok', budgetMs: MAX_MS, budgetSource: 'header' });
        expect(line?.requestedMs as number, value).toBeGreaterThan(MAX_MS);
      }
    });

    it('garbage, overlong, repeated: a proper status every time, never over maxMs, and the server serves on', async () => {
      const values: (string | string[])[] = ['abc', '5', '', 'm', '1.5S', '10s', '-1m', 'x100my', '100m,200m'];
      values.push(['1S', '50m'], '9'.repeat(400), `${'1'.repeat(31)}S`, '123456789m');
      for (const value of values) {
        const { answer, line } = await send(value);
        expect(answer.httpStatus, String(value)).toBe(200);
        expect(['0', '3', '4'], String(value)).toContain(answer.grpcStatus);
        if (line !== undefined) expect(line.budgetMs as number, String(value)).toBeLessThanOrEqual(MAX_MS);
      }
      const { answer } = await send('1S');
      expect(answer.grpcStatus).toBe('0');
    });
  });
});
