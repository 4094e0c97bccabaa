/**
 * A grpc-js server, built as the guide says, under clients no one here wrote: Python's grpcio, curl and nghttp, and a
 * bare HTTP/2 client sending `grpc-timeout` values no gRPC library would. Our own clients cannot show what these do: a
 * grpc-js or Connect-ES client's own timer fires first and the server's answer is never read. The caller's own
 * deadline is answered DEADLINE_EXCEEDED naming this hop, before grpc-js's own timer answers without the trailer; the
 * handler's query stops with a DeadlineExceededError and is gone from pg_stat_activity; the call's line says
 * `deadline_exceeded`.
 */
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
import { grpcFrame, queryRequest } from '../../../test/support/grpc-wire.ts';
import { HostileTimeouts, ZERO_TIMEOUTS } from '../../../test/support/hostile-timeouts.ts';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { CallLines, type CutOff, cutOffStatement } from '../../../test/support/statement-cut-off.ts';
import { ServerActivity } from '../../pg/test/support/activity.ts';
import { type Watched, watchingTheLoop } from '../../server/test/loop-lateness.ts';
import { GRPC_JS_TIMER_LEAD_MS } from '../src/incoming-call.ts';
import { events, type Served, serve } from './support.ts';

/** A test's `annotate`, as vitest gives it. */
type Annotate = (message: string) => Promise<unknown>;

const available = (await requireService(POSTGRES)) && (await requireForeignClients(PYTHON_GRPCIO, CURL, NGHTTP));

const QUERY = '/deadline.test.Inventory/Query';
const MAX_MS = 2_000;
/** What a gRPC client without generated code sends: its budget in grpc-timeout, and nothing else of ours. */
const GRPC_300MS = { 'content-type': 'application/grpc', te: 'trailers', 'grpc-timeout': '300m' };
/**
 * How late the event loop may run and the call still be read as the caller's deadline for sure. The server anchors
 * the caller's relative timeout when it gets to the call, and grpc-js arms its own timer on the loop's clock, which
 * lags by however long the turn had run: a loop that late sees the caller's own timer (grpcio's), or grpc-js's, fire
 * that much before its copy of the deadline. The library reads a reset within 100 ms of it as the deadline (core's
 * `AT_THE_DEADLINE_MS`); half of that is sure.
 */
const SURELY_ON_TIME_MS = 50;

describe.runIf(available)('a grpc-js server under clients in other languages', () => {
  let pool: pg.Pool;
  let activity: ServerActivity;
  let inventory: Served;
  const lines = new CallLines();

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2, application_name: `deadline-grpc-${process.pid}` });
    activity = await ServerActivity.open();
    const db = pgWithDeadline(pool, { name: 'inventory-db' });
    inventory = await serve(
      {
        serviceName: 'inventory',
        defaultMs: 1_000,
        maxMs: MAX_MS,
        trust: (call) => call.metadata.get('x-internal')[0] === '1',
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
   * The server's side of a call cut off by the caller's 300 ms: the handler's query failed with this hop's deadline,
   * the line says so, and the statement was gone soon after the 300 ms. So on any machine whose event loop ran on time;
   * one that ran later than {@link SURELY_ON_TIME_MS} may have seen the caller's reset (or grpc-js's answer) come far
   * enough ahead of its own copy of the deadline to read it as the caller leaving: the work stopped all the same. The
   * time the call was sent is read by this loop too, so the statement's earliest end moves by its lateness.
   */
  async function expectCutOffHere(
    { value: cut, worstMs }: Watched<CutOff<unknown>>,
    annotate: Annotate,
  ): Promise<void> {
    const typed = findDeadlineError(cut.error);
    if (worstMs <= SURELY_ON_TIME_MS || !(typed instanceof CancelledError)) {
      expect(typed).toBeInstanceOf(DeadlineExceededError);
      expect((typed as DeadlineExceededError).target).toBe('inventory-db');
      expect(cut.line).toMatchObject({ outcome: 'deadline_exceeded', code: 4, exceededBy: 'inventory' });
    } else {
      expect(typed).toMatchObject({ reason: 'client-disconnected' });
      expect(cut.line).toMatchObject({ outcome: 'cancelled' });
    }
    expect(cut.goneAfterMs).toBeGreaterThan(200 - worstMs);
    expect(cut.goneAfterMs).toBeLessThan(2_000);
    await annotate(
      `event loop ${Math.round(worstMs)} ms late at worst; the server read the cut as ${cut.line.outcome}`,
    );
  }

  /**
   * The answer's `x-deadline-exceeded-by`, which the server sends GRPC_JS_TIMER_LEAD_MS before grpc-js's own timer
   * would answer without it: sure to be there when the event loop ran later than that at no point (grpc-js's timer,
   * armed on the loop's lagging clock, fires early by as much).
   */
  function expectNamedHere(grpc: { status: string | undefined; exceededBy: string | undefined }, worstMs: number) {
    expect(grpc.status).toBe('4');
    if (worstMs < GRPC_JS_TIMER_LEAD_MS) expect(grpc.exceededBy).toBe('inventory');
    else expect([undefined, 'inventory']).toContain(grpc.exceededBy);
  }

  it("Python's grpcio, timeout=0.3: DEADLINE_EXCEEDED, and the handler's statement is cut off", async ({
    annotate,
  }) => {
    const watched = await watchingTheLoop(() =>
      cutOffStatement(activity, lines, (sql) => grpcio(inventory.address, QUERY, queryRequest(sql), 0.3)),
    );
    await expectCutOffHere(watched, annotate);
    const cut = watched.value;
    expect(cut.answer.code).toBe('DEADLINE_EXCEEDED');
    // Answered at the deadline, by the server or by grpcio's own timer: no sooner than the server's timers, which
    // a late loop's clock fires early.
    expect(cut.answer.elapsedMs).toBeGreaterThan(250 - watched.worstMs);
    expect(cut.answer.elapsedMs).toBeLessThan(2_000);
    await annotate(
      `grpcio: ${cut.answer.code} "${cut.answer.details}" (trailer: ${cut.answer.trailers['x-deadline-exceeded-by'] ?? 'none'}) after ` +
        `${Math.round(cut.answer.elapsedMs)} ms; statement gone ${Math.round(cut.goneAfterMs)} ms after the call left`,
    );
  });

  it('curl, grpc-timeout: 300m: grpc-status 4 with the trailer naming this hop, before grpc-js answers', async ({
    annotate,
  }) => {
    const watched = await watchingTheLoop(() =>
      cutOffStatement(activity, lines, (sql) =>
        curl(`http://${inventory.address}${QUERY}`, GRPC_300MS, grpcFrame(queryRequest(sql))),
      ),
    );
    await expectCutOffHere(watched, annotate);
    const cut = watched.value;
    expect(cut.answer.status).toBe(200);
    expectNamedHere(cut.answer.grpc, watched.worstMs);
    // Answered at the deadline: no sooner than the timers that answer it, which a late loop's clock fires early.
    expect(cut.answer.timeMs).toBeGreaterThan(250 - watched.worstMs);
    expect(cut.answer.timeMs).toBeLessThan(2_000);
    await annotate(
      `curl: grpc-status ${cut.answer.grpc.status}, x-deadline-exceeded-by ${cut.answer.grpc.exceededBy} after ` +
        `${Math.round(cut.answer.timeMs)} ms; statement gone ${Math.round(cut.goneAfterMs)} ms after the call left`,
    );
  });

  it('nghttp, grpc-timeout: 300m: the same, read frame by frame', async ({ annotate }) => {
    const watched = await watchingTheLoop(() =>
      cutOffStatement(activity, lines, (sql) =>
        nghttp(`http://${inventory.address}${QUERY}`, GRPC_300MS, grpcFrame(queryRequest(sql))),
      ),
    );
    await expectCutOffHere(watched, annotate);
    const cut = watched.value;
    expect(cut.answer.headers[':status']).toBe('200');
    expectNamedHere(cut.answer.grpc, watched.worstMs);
    await annotate(
      `nghttp: grpc-status ${cut.answer.grpc.status}, x-deadline-exceeded-by ${cut.answer.grpc.exceededBy}; ` +
        `statement gone ${Math.round(cut.goneAfterMs)} ms after the call left`,
    );
  });

  describe('hostile grpc-timeout values from a bare HTTP/2 client', () => {
    // grpc-js refuses a value it cannot read before any handler runs, with INTERNAL (13).
    const hostile = new HostileTimeouts(() => `http://${inventory.address}`, lines, events, '13');
    beforeAll(() => hostile.start());
    afterAll(() => hostile.stop());
    const send = (value: string | string[]) => hostile.send(value);

    it('zero of any unit: refused at once, DEADLINE_EXCEEDED naming this hop, the handler not run', async () => {
      for (const value of ZERO_TIMEOUTS) {
        // grpc-js reads whole milliseconds: nothing left of any of them.
        const { line } = await hostile.expectRefused(value, 'inventory');
        expect(line?.budgetMs, value).toBe(0);
      }
    });

    it('more than 2^31−1 ms: never over maxMs; where grpc-js wraps it below 0, refused as no time left', async () => {
      // grpc-js reads `(value × unit) | 0`: 99999999H is 132,616,576 ms to it, 2147484S is −2,147,483,296.
      const runs = ['99999999H', '99999999S', '2147483S', '1194H', '4294972S', '123456789m', `${'1'.repeat(40)}m`];
      for (const value of runs) {
        const { answer, ran, line } = await send(value);
        expect({ value, status: answer.grpcStatus, ran }).toEqual({ value, status: '0', ran: true });
        expect(line, value).toMatchObject({ outcome: 'ok', budgetMs: MAX_MS, budgetSource: 'header' });
        expect(line?.requestedMs as number, value).toBeGreaterThan(MAX_MS);
      }
      // Wrapped below 0 by grpc-js: no time left.
      for (const value of ['2147484S', '35792M', '597H', '1193H', '9999999H', '99999999M']) {
        const { line } = await hostile.expectRefused(value, 'inventory');
        expect(line?.budgetMs, value).toBe(0);
      }
    });

    it('garbage, overlong, repeated: a proper status every time, never over maxMs, and the server serves on', async () => {
      const values: (string | string[])[] = ['abc', '5', '', 'm', '1.5S', '10s', '-1m', 'x100my', '100m,200m'];
      values.push(['1S', '50m'], '9'.repeat(400), `${'1'.repeat(31)}S`);
      for (const value of values) {
        const { answer, line } = await send(value);
        expect(answer.httpStatus, String(value)).toBe(200);
        expect(['0', '4', '13'], String(value)).toContain(answer.grpcStatus);
        if (line !== undefined) expect(line.budgetMs as number, String(value)).toBeLessThanOrEqual(MAX_MS);
      }
      const { answer } = await send('1S');
      expect(answer.grpcStatus).toBe('0');
    });
  });
});
