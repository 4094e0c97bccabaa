/**
 * Issue 16: a KILL QUERY names a thread by its id, and a server hands its ids out again from the bottom after a
 * restart; a failover reaches another server, with ids of its own. A statement whose connection was cut on the
 * way (its close never arrives: the silent forwarder) reaches its deadline after the server restarted, or after
 * its address moved to a standby; the side connection, which did hear of the fault, is opened again, and reaches
 * the new run, where the statement's thread id now belongs to someone else's connection. That connection's
 * statement must run on: no KILL may reach the new run for a connection of the old one. KILLs for the new run's
 * own connections still go out.
 *
 * On private servers (the shared one must never be restarted), reached through the forwarder.
 */
import type { Socket } from 'node:net';
import { DeadlineExceededError } from '@deadline/core';
import { type Connection, createConnection, createPool, type PoolConnection, type RowDataPacket } from 'mysql2/promise';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type ProcessWatch, watchProcess } from '../../../test/support/process-watch.ts';
import { timerLateness } from '../../../test/support/settle.ts';
import { withDeadline } from '../src/index.ts';
import { KILL_TIMEOUT_MS } from '../src/killer.ts';
import { PrivateMariadb, requireMariadbd } from './private-mariadb.ts';
import { SilentForwarder } from './silent-forwarder.ts';
import { marker, underDeadline, Watcher } from './support.ts';

const binary = requireMariadbd();

/** The budget of the statement the fault happens under: the fault and what follows fit in it, on a busy machine. */
const BUDGET_MS = 5_000;
/** How late past its deadline a call may settle, on a busy 2-core machine, and still not count as hanging. */
const SETTLE_MARGIN_MS = 1_000;
/**
 * A statement KILLed at its deadline is gone from the server within this past a plain timer due with the deadline
 * (as late as the machine let that fire, settle.ts): a KILL that waited for its timeout would leave it 2 s more.
 */
const GONE_MS = 1_000;
/** The warm-up statement's budget: room for it to reach the server first on a busy machine, its connection made. */
const WARM_BUDGET_MS = 300;
/** Thread ids a run hands out before the statement's connection: more than a new run hands out before it is asked. */
const IDS_BEFORE = 12;

/** Opens and closes connections to `server` until its thread ids have passed `count`. */
async function spendIds(server: PrivateMariadb, count: number): Promise<void> {
  for (;;) {
    const connection = await createConnection(server.options());
    await connection.end();
    if (connection.threadId >= count) return;
  }
}

/** A connection straight to `server` whose thread id is `id`: the ids below it are spent on connections closed at once. */
async function connectionWithId(server: PrivateMariadb, id: number): Promise<Connection> {
  for (;;) {
    const connection = await createConnection(server.options());
    if (connection.threadId === id) return connection;
    await connection.end();
    if (connection.threadId > id) throw new Error(`this run handed out id ${connection.threadId} before ${id}`);
  }
}

/** How many KILL statements the server has run in this run. */
async function killsRun(watcher: Watcher): Promise<number> {
  const [rows] = await watcher.query<RowDataPacket[]>("SHOW GLOBAL STATUS LIKE 'Com_kill'");
  return Number(rows[0]?.Value);
}

/** Polls until the server's run is at least `seconds` old, by its own count. */
async function waitUptime(watcher: Watcher, seconds: number): Promise<void> {
  for (;;) {
    const [rows] = await watcher.query<RowDataPacket[]>("SHOW GLOBAL STATUS LIKE 'Uptime'");
    if (Number(rows[0]?.Value) >= seconds) return;
  }
}

/** A fault between a statement and its deadline, from the server the statement's connection is on to another run. */
interface Fault {
  name: string;
  /** The server the statement's connection is on, and the one its address leads to after the fault. */
  from: PrivateMariadb;
  to: PrivateMariadb;
  /** Brings the fault about; resolves once `to` accepts connections. */
  happen(forwarder: SilentForwarder): Promise<void>;
}

/**
 * A statement through the forwarder, its connection cut by `fault`; on the run the address leads to afterwards,
 * a connection that has the statement's thread id runs a statement of its own through the statement's deadline.
 * That statement must run on, and the run sees no KILL. Then, once the cut connection is let go, a statement on
 * a connection of that run is KILLed at its deadline as usual.
 */
async function cutUnder(fault: Fault): Promise<void> {
  const { from, to } = fault;
  let cutPort: number | undefined;
  const forwarder = await SilentForwarder.open('127.0.0.1', from.port, (port) => port === cutPort);
  const pool = createPool({ ...from.options(), port: forwarder.port, connectionLimit: 1 });
  const db = withDeadline(pool);
  let acquired: unknown;
  pool.on('acquire', (connection) => {
    acquired = connection;
  });
  const opened: { end(): Promise<void> }[] = [];
  try {
    const before = await Watcher.open(from.options());
    opened.push(before);
    // Past the run's first seconds, where its coarse start time leaves in doubt whether a connection is its own.
    await waitUptime(before, 3);
    await spendIds(from, IDS_BEFORE);
    // Before the fault, statements are KILLed at their deadline; and the side connection has learnt the server
    // it reached, to tell it from the next one (a killer whose first side connection reaches a server only after
    // the failover cannot: server-run.ts). DO carries no belt: only a KILL stops it. The pool's connection made
    // first, outside any deadline: on a busy machine its login took the warm-up's whole budget, the statement
    // never reached the server, no KILL went out, and the side connection had not reached it before the fault.
    await db.query('SELECT 1');
    const warm = marker();
    const warmLate = timerLateness(WARM_BUDGET_MS);
    const warmed = await underDeadline(WARM_BUDGET_MS, () => db.query(`DO SLEEP(5) /* ${warm} */`));
    expect(warmed.error).toBeInstanceOf(DeadlineExceededError);
    expect((await before.waitGone(warm)) - warmed.deadlineAt).toBeLessThan((await warmLate) + GONE_MS);
    expect(await killsRun(before), 'the warm-up statement was stopped by a KILL').toBeGreaterThanOrEqual(1);
    const mark = marker();
    const deadlineAt = performance.now() + BUDGET_MS;
    const cut = underDeadline(BUDGET_MS, () => db.query(`SELECT SLEEP(60) /* ${mark} */`));
    await before.waitRunning(mark);
    // The pool's one connection, running it: when the server goes away, its close is withheld (cut on the way).
    const target = acquired as PoolConnection['connection'] & { stream: Socket };
    const targetId = target.threadId;
    expect(await before.threadRunning(mark)).toBe(targetId);
    cutPort = target.stream.localPort;

    await fault.happen(forwarder);
    const faultedAt = performance.now();
    await forwarder.heard(1); // the side connection has heard: the next KILL opens a new one, to the new run

    const watcher = await Watcher.open(to.options());
    opened.push(watcher);
    const innocent = await connectionWithId(to, targetId);
    opened.push(innocent);
    // It sleeps past the deadline and past the time the cut connection's cleanup may take.
    const leftMs = deadlineAt - performance.now();
    expect(leftMs, 'the fault took longer than the statement’s budget: raise BUDGET_MS').toBeGreaterThan(100);
    const seconds = Math.ceil((leftMs + KILL_TIMEOUT_MS + SETTLE_MARGIN_MS) / 1000);
    const innocentMark = marker();
    const sleeping = innocent
      .query<RowDataPacket[]>(`SELECT SLEEP(${seconds}) AS slept /* ${innocentMark} */`)
      .then(
        ([rows]) => ({ slept: rows[0]?.slept, error: undefined }),
        (error: unknown) => ({ slept: 1, error }),
      )
      .then((outcome) => ({ ...outcome, at: performance.now() }));
    await watcher.waitRunning(innocentMark);

    const stopped = await cut;
    expect(stopped.error).toBeInstanceOf(DeadlineExceededError);
    expect(stopped.at).toBeLessThanOrEqual(stopped.deadlineAt + SETTLE_MARGIN_MS);
    // The next statement waits for the pool's one slot: it runs once the cut connection is let go.
    const next = underDeadline(KILL_TIMEOUT_MS + 3_000, () => db.query('SELECT 1'));
    // Interrupted by a KILL QUERY, SLEEP() fails with errno 1317 (or returns 1) as the KILL lands.
    const innocentOutcome = await sleeping;
    const kills = await killsRun(watcher);
    console.log(
      `${fault.name}: the new run ready ${to.startedInMs.toFixed(0)} ms after it was spawned; the cut statement answered ` +
        `${(stopped.at - stopped.deadlineAt).toFixed(1)} ms after its deadline; thread ${targetId} of the new run ran ` +
        `SELECT SLEEP(${seconds}) from ${(stopped.deadlineAt - faultedAt).toFixed(0)} ms before that deadline: ` +
        `returned ${innocentOutcome.slept}${innocentOutcome.error === undefined ? '' : ` (${String(innocentOutcome.error)})`} ` +
        `${(innocentOutcome.at - stopped.deadlineAt).toFixed(0)} ms after it; KILL statements run by the new run: ${kills}`,
    );
    expect(innocentOutcome, 'the new run’s connection with the old thread id was hit').toMatchObject({
      slept: 0,
      error: undefined,
    });
    expect(kills).toBe(0);

    // The cut connection was let go, and a connection to the new run took its place: opened after the cut one
    // was held for KILL_TIMEOUT_MS past the deadline, by when the side connection had reached the new run; so seen
    // alive after that run started, by more than its coarse start time leaves in doubt (it was up before the
    // deadline). Its statements are KILLed again. DO carries no belt: only a KILL stops it at its deadline.
    const freed = await next;
    expect(freed.error).toBeUndefined();
    const freedMs = freed.at - stopped.deadlineAt;
    expect(freedMs).toBeLessThan(KILL_TIMEOUT_MS + SETTLE_MARGIN_MS);
    const fresh = marker();
    const freshLate = timerLateness(300);
    const killed = await underDeadline(300, () => db.query(`DO SLEEP(5) /* ${fresh} */`));
    expect(killed.error).toBeInstanceOf(DeadlineExceededError);
    const goneMs = (await watcher.waitGone(fresh)) - killed.deadlineAt;
    expect(goneMs).toBeLessThan((await freshLate) + GONE_MS);
    // One, or two when the first reached the server before the statement did.
    expect(await killsRun(watcher)).toBeGreaterThanOrEqual(1);
    console.log(
      `${fault.name}, afterwards: the cut connection let go, a connection of the new run serving ${freedMs.toFixed(0)} ms after the deadline; ` +
        `a statement of the new run stopped by KILL QUERY ${goneMs.toFixed(1)} ms after its own deadline`,
    );
  } finally {
    await Promise.all(opened.map((connection) => connection.end().catch(() => {})));
    // First the forwarder: it closes a cut connection still held, which the pool's end() would wait for. That
    // connection's end then fails: the test's own failure is the one to report.
    await forwarder.close();
    await db.end().catch(() => {});
  }
}

describe.runIf(binary !== undefined)('a server restarted, or failed over, under a statement (private MariaDB)', () => {
  let servers: { restarted: PrivateMariadb; primary: PrivateMariadb; standby: PrivateMariadb };
  // An 'error' event nobody listens to is thrown, and reaches the process as an uncaught exception.
  let watch: ProcessWatch;

  beforeAll(async () => {
    watch = watchProcess();
    const started = await Promise.allSettled([1, 2, 3].map(() => PrivateMariadb.start(binary as string)));
    const [restarted, primary, standby] = started.map((outcome) =>
      outcome.status === 'fulfilled' ? outcome.value : undefined,
    );
    if (restarted === undefined || primary === undefined || standby === undefined) {
      await Promise.all([restarted?.destroy(), primary?.destroy(), standby?.destroy()]);
      throw started.find((outcome) => outcome.status === 'rejected')?.reason;
    }
    servers = { restarted, primary, standby };
    console.log(
      `private MariaDB servers ready ${[restarted, primary, standby].map((server) => server.startedInMs.toFixed(0)).join(', ')} ms after they were spawned`,
    );
  });

  afterEach(() => {
    expect(watch.seen).toEqual([]);
  });

  afterAll(async () => {
    if (servers !== undefined) await Promise.all(Object.values(servers).map((server) => server.destroy()));
    watch?.stop();
  });

  // Each on servers of its own: they run side by side.
  it.concurrent('a restart: a KILL due for a connection of the previous run reaches nothing; the new run keeps its statements and its KILLs', async () => {
    const { restarted } = servers;
    await cutUnder({ name: 'restart', from: restarted, to: restarted, happen: () => restarted.restart() });
  }, 60_000);

  it.concurrent('a failover: a KILL due for a connection of the old server reaches nothing on the standby; the standby keeps its KILLs', async () => {
    const { primary, standby } = servers;
    // The standby has been up since before the statement's connection was first seen: its run's start alone
    // would let a KILL for that connection through. Only its identity tells it from the primary.
    await cutUnder({
      name: 'failover',
      from: primary,
      to: standby,
      happen: async (forwarder) => {
        forwarder.moveTo('127.0.0.1', standby.port);
        await primary.stop();
      },
    });
  }, 60_000);
});
