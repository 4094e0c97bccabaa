/**
 * One connection as this package drives it. Statements go through a gate, one at a time: the next is not sent
 * until the last one's cleanup is done. Under a deadline each statement carries the belt (the server's own
 * limit), and when its call stops the caller is answered at once while a KILL QUERY for the connection's thread
 * goes out on the side connection.
 *
 * Why the gate: a KILL names a thread, not a statement. If the statement finished just as we sent it, the KILL
 * must not land on whatever that thread runs next; so nothing runs next until the KILL has completed. After
 * that, the session is "dirty" when we cannot tell the KILL hit our statement (the statement finished first, or
 * the KILL failed): a pooled connection in that state is destroyed, never returned to the pool.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { markCausedBy, type OutgoingCall, runWithCall, unpatched } from '@deadline/core/internal';
import type { Connection, FieldPacket, QueryResult } from 'mysql2/promise';
import type { Backend } from './backend.js';
import { beltSql, hasOwnLimit, sessionBelt } from './belt.js';
import { beforeCommandAnswers } from './core-connection.js';
import {
  ER_QUERY_INTERRUPTED,
  errnoOf,
  isFatal,
  isServerTimeout,
  serverLimitOf,
  serverTimeoutError,
} from './driver-errors.js';
import type { Flavour } from './flavour.js';
import { KILL_TIMEOUT_MS } from './killer.js';
import { abandon, isLost, watchForLoss } from './lost-connections.js';
import { sightingOf, watchForSighting } from './sightings.js';
import type { ExecuteValues, QueryValues, Sql } from './types.js';

/** @internal The two ways mysql2 runs a statement: text protocol and prepared. */
export type Kind = 'query' | 'execute';

type Result = [QueryResult, FieldPacket[]];
type Send = (sql: Sql, values?: QueryValues | ExecuteValues) => Promise<Result>;

/** Settles the caller's promise once: by the statement, or earlier by the stop. */
interface Answer {
  ok(value: Result): void;
  fail(error: unknown): void;
}

/** What the stop listener needs to know about the statement on the wire. */
interface Running {
  /** The connection's thread while the statement runs; `undefined` before it is sent and once it settled. */
  threadId: number | undefined;
  /** Resolves when the statement settles, however. */
  settled: Promise<unknown>;
  /** The KILLs for it, once the call stopped: resolves whether the last one completed. */
  kill: Promise<boolean> | undefined;
  /** A KILL is on its way: were the statement to settle now, that KILL could land after it. */
  killInFlight: boolean;
  /** The call it runs for: told when a KILL completed (the server confirmed the stop). */
  readonly call: OutgoingCall;
  /** Called once the statement has settled (or, never sent, once the call is over). */
  readonly onSettled: () => void;
}

/** Pauses between KILLs for a statement that outlived one: 1, 2, 4 … ms, at most this. */
const MAX_KILL_PAUSE_MS = 50;

/** Ms left for the call now (after its margin); `undefined` when it has no timeout. */
function remainingOf(call: OutgoingCall): number | undefined {
  return call.timeoutMs === undefined ? undefined : call.timeoutMs - call.elapsedMs();
}

function withBelt(sql: Sql, flavour: Flavour, ms: number): Sql {
  if (typeof sql === 'string') return beltSql(flavour, sql, ms);
  if (hasOwnLimit(sql)) return sql;
  return { ...sql, sql: beltSql(flavour, sql.sql, ms) };
}

/** @internal */
export class Session {
  readonly connection: Connection;
  readonly #backend: Backend;
  /** Resolves when the last statement, and its cleanup, are done: the gate. Never rejects. */
  #idle: Promise<unknown> = Promise.resolve();
  /** Resolves when every statement sent so far has settled, its cleanup (the KILL) perhaps still out. */
  #settled: Promise<unknown> = Promise.resolve();
  /** KILLs sent for this connection's statements and not yet answered (or given up). */
  #killsOut = 0;
  #dirty = false;

  constructor(connection: Connection, backend: Backend) {
    this.connection = connection;
    this.#backend = backend;
    watchForLoss(connection);
    watchForSighting(connection);
  }

  /**
   * The connection cannot be vouched for: a KILL may have missed, or it failed, or the connection is gone.
   * Destroy it rather than reuse it.
   */
  get dirty(): boolean {
    return this.#dirty || isLost(this.connection);
  }

  /** Marks the connection as one that must not be reused (a ROLLBACK that failed). */
  invalidate(): void {
    this.#dirty = true;
  }

  /** Resolves when every statement sent so far, and its cleanup, is done. Never rejects. */
  idle(): Promise<void> {
    return this.#idle.then(() => {});
  }

  /**
   * Resolves `true` once idle; or `false` when every statement sent so far has settled but a KILL sent for one
   * is still unanswered `ms` later (the server holds it up). A connection that will not be used again can then be
   * destroyed instead of waited for: its statements are over, and a KILL landing late finds its thread gone
   * rather than someone else's statement. Never rejects.
   */
  async idleWithin(ms: number): Promise<boolean> {
    await this.#settled;
    if (this.#killsOut === 0) {
      await this.idle();
      return true;
    }
    let timer: NodeJS.Timeout | undefined;
    const held = new Promise<false>((resolve) => {
      timer = setTimeout(resolve, ms, false);
      timer.unref();
    });
    try {
      return await Promise.race([this.idle().then(() => true), held]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Runs `sql` after the gate; bounded by `call`'s call when given (the belt, the KILL, the answer at the stop),
   * else exactly as mysql2 would run it.
   */
  run<T extends QueryResult>(
    kind: Kind,
    sql: Sql,
    values: QueryValues | ExecuteValues | undefined,
    call: OutgoingCall | undefined,
  ): Promise<[T, FieldPacket[]]> {
    const previous = this.#idle;
    let settled: () => void = () => {};
    this.#settled = Promise.all([this.#settled, new Promise<void>((resolve) => (settled = resolve))]);
    return new Promise<Result>((resolve, reject) => {
      let answered = false;
      const answer: Answer = {
        ok: (value) => {
          if (answered) return;
          answered = true;
          resolve(value);
        },
        fail: (error) => {
          if (answered) return;
          answered = true;
          reject(error);
        },
      };
      const done =
        call === undefined
          ? this.#unbounded(previous, kind, sql, values, answer)
          : this.#bounded(previous, kind, sql, values, call, answer, settled);
      void done.then(settled);
      this.#idle = Promise.all([previous, done]);
    }) as Promise<[T, FieldPacket[]]>;
  }

  /** A statement with no bound or belt of its own (BEGIN, COMMIT, ROLLBACK), after the gate. */
  plain(sql: string): Promise<void> {
    const done = this.#idle.then(() => unpatched(() => this.connection.query(sql))).then(() => {});
    this.#idle = done.catch((error: unknown) => {
      if (isFatal(error)) this.#dirty = true;
    });
    return done;
  }

  #send(kind: Kind): Send {
    const connection = this.connection;
    const send = (kind === 'query' ? connection.query : connection.execute).bind(connection) as unknown as Send;
    // Bounded here already: an instrumented driver (instrumentMysql) passes it through.
    return (sql, values) => unpatched(() => send(sql, values));
  }

  async #unbounded(previous: Promise<unknown>, kind: Kind, sql: Sql, values: unknown, answer: Answer) {
    await previous;
    try {
      answer.ok(await this.#send(kind)(sql, values as QueryValues));
    } catch (error) {
      if (isFatal(error)) this.#dirty = true;
      answer.fail(error);
    }
  }

  async #bounded(
    previous: Promise<unknown>,
    kind: Kind,
    sql: Sql,
    values: unknown,
    call: OutgoingCall,
    answer: Answer,
    onSettled: () => void,
  ): Promise<void> {
    const running: Running = {
      threadId: undefined,
      settled: Promise.resolve(),
      kill: undefined,
      killInFlight: false,
      call,
      onSettled,
    };
    const off = call.onStop((reason) => {
      answer.fail(reason);
      if (running.threadId !== undefined && running.kill === undefined) {
        this.#killsOut++;
        running.kill = this.#kill(running).finally(() => this.#killsOut--);
      }
    });
    try {
      await this.#drive(previous, kind, sql, values as QueryValues, call, running, answer);
    } catch (error) {
      // A bug of ours: the caller still hears, and the connection cannot be vouched for.
      this.#dirty = true;
      answer.fail(error);
    } finally {
      off();
    }
  }

  async #drive(
    previous: Promise<unknown>,
    kind: Kind,
    sql: Sql,
    values: QueryValues,
    call: OutgoingCall,
    running: Running,
    answer: Answer,
  ): Promise<void> {
    await call.race(() => previous).catch(() => {});
    if (call.stopReason !== undefined) return; // stopped at the gate: nothing sent
    const flavour = this.#backend.flavourFor(this.connection);
    const ms = remainingOf(call);
    if (kind === 'execute' && flavour !== undefined && ms !== undefined) {
      const belt = sessionBelt(flavour, ms);
      let restore: string | undefined;
      try {
        await unpatched(() => this.connection.query(belt.set));
        restore = belt.restore;
      } catch (error) {
        if (isFatal(error)) {
          this.#dirty = true;
          answer.fail(error);
          return;
        }
        // A server without the variable (MySQL before 5.7.8): the KILL alone bounds the statement.
      }
      try {
        // Stopped during the SET: the statement itself is not sent.
        if (call.stopReason === undefined) await this.#statement(kind, sql, values, call, running, answer);
      } finally {
        if (restore !== undefined) {
          await unpatched(() => this.connection.query(restore)).catch(() => {
            this.#dirty = true; // the session's limit is not what the application set
          });
        }
      }
      return;
    }
    const text = flavour !== undefined && ms !== undefined && kind === 'query' ? withBelt(sql, flavour, ms) : sql;
    await this.#statement(kind, text, values, call, running, answer);
  }

  /** Sends the statement, answers the caller if the stop has not, and waits for our KILL, if any, to complete. */
  async #statement(kind: Kind, sql: Sql, values: QueryValues, call: OutgoingCall, running: Running, answer: Answer) {
    // With the call in OpenTelemetry's context: a mysql2 instrumentation's span, made inside, is the call's.
    const pending = runWithCall(call, () => this.#send(kind)(sql, values));
    // Once stopped, the statement's own error confirms the stop as surely as the KILL's OK, and it can come first:
    // the two answer on different connections. Its 1317 is our KILL; its server limit is the belt, which fires
    // first when our KILL left late (the event loop blocked at the deadline). Heard before the driver answers, it
    // lands on the call's span before that ends.
    beforeCommandAnswers(this.connection, (error) => {
      if (running.kill === undefined) return;
      const by = errnoOf(error) === ER_QUERY_INTERRUPTED ? 'KILL QUERY' : serverLimitOf(error);
      if (by !== undefined) call.confirmStop(by);
    });
    running.settled = pending.catch(() => {});
    running.threadId = this.connection.threadId ?? undefined;
    let failed = false;
    let error: unknown;
    let value: Result | undefined;
    try {
      value = await pending;
    } catch (caught) {
      failed = true;
      error = caught;
    }
    running.threadId = undefined; // a stop from now on has nothing to kill
    running.onSettled();
    const kill = running.kill;
    if (kill === undefined) {
      if (!failed) answer.ok(value as Result);
      // The server's limit fired before our stop did: the call is cut off all the same (the call answers). Unless
      // the limit was the caller's own.
      else if (isServerTimeout(error) && call.stopReason === undefined && !hasOwnLimit(sql)) {
        call.stop(serverTimeoutError(call, error));
      } else {
        if (isFatal(error)) this.#dirty = true;
        answer.fail(error);
      }
      return;
    }
    // Stopped while running: the caller has its answer. Is the connection safe to reuse?
    const settledFirst = running.killInFlight;
    const reason = call.stopReason;
    if (failed && reason !== undefined) markCausedBy(error, reason);
    const killed = await kill;
    const hitUs = failed && errnoOf(error) === ER_QUERY_INTERRUPTED;
    if (!killed || isFatal(error) || (settledFirst && !hitUs)) this.#dirty = true;
  }

  /**
   * KILL QUERY until the statement settles. One is usually enough; another is needed when the first reached the
   * server before the statement did (it was still on the wire, or `execute()` was between its PREPARE and its
   * EXECUTE): a KILL QUERY finding the thread idle is dropped. Resolves whether the last KILL completed; gives up
   * re-sending after KILL_TIMEOUT_MS (a statement rolling back a large change ignores KILLs; the gate still waits
   * for it to end), and at once when the server has no such thread, or when the thread may not be ours on the
   * server run the side connection reached (server-run.ts), or when no side connection can be had.
   */
  async #kill(running: Running): Promise<boolean> {
    const threadId = running.threadId as number;
    const killer = this.#backend.killer;
    const started = performance.now();
    for (let pause = 1; ; pause = Math.min(pause * 2, MAX_KILL_PAUSE_MS)) {
      // The thread ended with its connection: there is nothing left to stop, and the id names no one.
      if (isLost(this.connection)) return true;
      running.killInFlight = true;
      const outcome = await killer.kill(threadId, sightingOf(this.connection));
      running.killInFlight = false;
      if (outcome === 'killed') running.call.confirmStop('KILL QUERY');
      if (outcome === 'no-such-thread' || outcome === 'elsewhere') return this.#outlive(running);
      if (outcome === 'held') return this.#waitOut(threadId);
      // Not known, or no side connection to be had (two in a row died or were refused): the connection is not
      // vouched for, and is destroyed rather than reused. Retrying here was tried: it held the connection for
      // up to KILL_TIMEOUT_MS while new connections were what the server could least afford (CI, a pool whose
      // every connection was killed: no success for 2 s).
      if (outcome === 'unknown' || outcome === 'unreachable') return false;
      if (running.threadId === undefined || performance.now() - started > KILL_TIMEOUT_MS) return true;
      await Promise.race([running.settled, delay(pause, undefined, { ref: false })]);
      if (running.threadId === undefined) return true;
    }
  }

  /**
   * The server took our KILL and has not answered it: it may carry it out late, on whatever the thread runs by
   * then (the likeliest account of what CI saw once, with mysql2 instrumented: the next request's `SLEEP(5)`
   * answered 3.5 ms in; killer.test.ts reproduces it with the KILL delayed on its way). So the gate stays shut
   * until the server answers it. If it never does (HELD_KILL_MS), the connection is closed: its thread ends, and
   * the KILL finds nothing. Resolves false: the statement's end was not vouched for by a KILL in time.
   */
  async #waitOut(threadId: number): Promise<boolean> {
    if (!(await this.#backend.killer.held(threadId))) abandon(this.connection);
    return false;
  }

  /**
   * No KILL can reach the statement: the server knows no thread by its connection id, or the side connection
   * reached a server run on which the connection was never seen alive (after a restart or a failover the id may
   * name someone else's connection there; or the run had just started, too recently to tell). Sending again
   * cannot help. Either the statement is alive (behind a proxy; on a run seen too early) and the server's own
   * limit stops it shortly, or the connection is gone without this process having heard: cut on the way, or left
   * behind by a restart or a failover. Then nothing will ever answer the statement, so once KILL_TIMEOUT_MS has
   * passed its socket is closed, rather than the connection held until TCP notices, hours later. Resolves true
   * when the statement settled of itself: no KILL of ours is left to land on the thread.
   */
  async #outlive(running: Running): Promise<boolean> {
    const settled = await Promise.race([
      running.settled.then(() => true),
      delay(KILL_TIMEOUT_MS, false, { ref: false }),
    ]);
    if (!settled) abandon(this.connection);
    return settled;
  }
}
