/**
 * KILL QUERY, sent on side connections: connections of our own to the same server, opened when a statement
 * first runs under a deadline, reused, closed by `end()`. Usually one is enough: a KILL takes well under a
 * millisecond, and new connections are what a loaded server can least afford.
 *
 * But the server may hold a KILL up: MariaDB wakes the target thread by taking the mutex it waits on, and tries
 * for up to a second when another thread holds it; a thread being torn down (killed, its connection cut) holds
 * it longer (seen in CI: a KILL unanswered for 2 s on a healthy side connection). KILLs queued behind such a one
 * on the same connection would all miss their statements' deadlines. So KILLs wait in a queue of ours, never in
 * the driver's: each side connection carries one KILL at a time, and when every one has carried its KILL for
 * longer than {@link STUCK_KILL_MS}, another is opened, up to {@link MAX_SIDE_CONNECTIONS}. The extra ones close
 * once idle for {@link SPARE_IDLE_MS}.
 *
 * Every KILL is bounded: one that does not complete within {@link KILL_TIMEOUT_MS} of being asked for gives up,
 * and the side connection it was on, if any, carries no other (a stuck connection is never waited on twice). One
 * still connecting is destroyed at once. One that sent its KILL is kept until the server answers it, for at most
 * {@link HELD_KILL_MS}, then closed: the server may carry the KILL out late, on whatever the thread runs by then,
 * so the connection it names must wait for that answer ({@link Killer.held}).
 */
import { outsideContext } from '@deadline/core/internal';
import { ER_NO_SUCH_THREAD, errnoOf, isFatal } from './driver-errors.js';
import { RunLog } from './server-run.js';
import type { SideConnection, SideOpener } from './side-connection.js';
import type { Sighting } from './sightings.js';

/** How long a KILL may take, queueing and the side connection's connect included, before we give up on it. */
export const KILL_TIMEOUT_MS = 2_000;

/** A KILL in flight for longer than this no longer holds up the next ones: they get a side connection of their own. */
export const STUCK_KILL_MS = 100;

/**
 * How long a KILL sent and not answered within KILL_TIMEOUT_MS is still waited for. The server had it: it may
 * carry it out whenever the mutex it waits on comes free (seen in CI: stalls of 2–5 s).
 */
export const HELD_KILL_MS = 10_000;

/** At most this many side connections per pool (or wrapped connection), however many KILLs are held up. */
export const MAX_SIDE_CONNECTIONS = 4;

/** A side connection beyond the first is closed once it has carried no KILL for this long. */
export const SPARE_IDLE_MS = 5_000;

const TIMED_OUT = Symbol('timed-out');
const ELSEWHERE = Symbol('elsewhere');

/**
 * @internal What became of a KILL QUERY: carried out; refused because the server has no such thread (the
 * connection it named is gone); not sent, because the side connection reached a server run on which the target
 * connection was never seen alive (the id may be someone else's there); not sent, because no side connection
 * could be had (two died, or failed to connect, one after the other: worth trying again a little later); sent and
 * not answered in time, so the server may still carry it out ({@link Killer.held} says when it has); or not known
 * (not sent in time, ended, refused otherwise).
 */
export type KillOutcome = 'killed' | 'no-such-thread' | 'elsewhere' | 'unreachable' | 'held' | 'unknown';

/** `promise`, or TIMED_OUT after `ms`; the timer never keeps the process up. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, ms), TIMED_OUT);
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** One side connection and the KILL it carries, if any. */
interface Slot {
  readonly side: SideConnection;
  /** When it took the KILL it carries (ms on `performance.now()`'s clock); `undefined` when idle. */
  busySince: number | undefined;
  /** Closes it once idle long enough, if it is a spare. */
  idleTimer: NodeJS.Timeout | undefined;
}

/** A KILL asked for and not yet answered. */
interface Wanted {
  readonly threadId: number;
  readonly seen: Sighting | undefined;
  /** When it gives up: `KILL_TIMEOUT_MS` after it was asked for. */
  readonly by: number;
  /** Side connections that died under it: a second one dying means the server cannot be reached now. */
  failures: number;
  /** Settled once; later calls do nothing. */
  settle(outcome: KillOutcome): void;
}

/** @internal */
export class Killer {
  readonly #opener: SideOpener;
  readonly #runs = new RunLog();
  readonly #slots: Slot[] = [];
  readonly #queue: Wanted[] = [];
  /** Side connections whose KILL was held up, kept until the server answers it. */
  readonly #retired = new Set<Slot>();
  /** For each thread a KILL was held up for: resolves once the server answered it (`true`), or gave up (`false`). */
  readonly #held = new Map<number, Promise<boolean>>();
  /** Sends the queue's head once a busy slot has been busy long enough for another slot to be opened. */
  #retry: NodeJS.Timeout | undefined;
  #ended = false;

  /** `open`: opens a side connection like the pool's (or the connection's) own (side-connection.ts). */
  constructor(open: SideOpener) {
    this.#opener = open;
  }

  /** Opens a side connection unless one is open (or ended). */
  prepare(): void {
    if (this.#slots.length === 0) this.#open();
  }

  /** Opens a side connection unless one is open; resolves with the server's version string, if it opened. */
  async serverVersion(): Promise<string | undefined> {
    const slot = this.#slots[0] ?? this.#open();
    if (slot === undefined) return undefined;
    try {
      const opened = await slot.side.ready;
      if (opened.serverVersion !== undefined) return opened.serverVersion;
      const [rows] = await outsideContext(() => opened.connection.query('SELECT VERSION() AS version'));
      const version = (rows as { version?: unknown }[])[0]?.version;
      return typeof version === 'string' ? version : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * Sends `KILL QUERY <threadId>`, the thread of the connection `seen` alive, if the side connection it goes out
   * on reached that connection's server run; resolves with what became of it. Never rejects.
   */
  kill(threadId: number, seen: Sighting | undefined): Promise<KillOutcome> {
    if (this.#ended || !Number.isSafeInteger(threadId) || threadId <= 0) return Promise.resolve('unknown');
    return new Promise<KillOutcome>((resolve) => {
      let settled = false;
      const wanted: Wanted = {
        threadId,
        seen,
        by: performance.now() + KILL_TIMEOUT_MS,
        failures: 0,
        settle: (outcome) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          resolve(outcome);
        },
      };
      // Still queued at its bound: it gives up (a KILL in flight is bounded where it is sent).
      const timer = setTimeout(() => {
        const at = this.#queue.indexOf(wanted);
        if (at >= 0) this.#queue.splice(at, 1);
        if (at >= 0) wanted.settle('unknown');
      }, KILL_TIMEOUT_MS);
      timer.unref();
      this.#queue.push(wanted);
      this.#pump();
    });
  }

  /**
   * After a `'held'` outcome for `threadId`: resolves `true` once the server has answered that KILL (it is carried
   * out, or found nothing: either way it can no longer land), or `false` when it gave no answer within
   * HELD_KILL_MS, or the side connection died, or the killer ended (it may still land, on whatever the thread
   * runs then). Resolves `true` when no KILL for the thread is held up.
   */
  held(threadId: number): Promise<boolean> {
    return this.#held.get(threadId) ?? Promise.resolve(true);
  }

  /** Closes the side connections: KILLs in flight complete first; queued and later ones resolve `'unknown'`. */
  async end(): Promise<void> {
    this.#ended = true;
    clearTimeout(this.#retry);
    for (const wanted of this.#queue.splice(0)) wanted.settle('unknown');
    // A held KILL's answer is no longer waited for: those waiting hear `false`.
    for (const slot of this.#retired) slot.side.destroy();
    await Promise.all(this.#slots.splice(0).map((slot) => this.#close(slot)));
  }

  /** Hands queued KILLs to idle side connections, opening another when all are held up. */
  #pump(): void {
    while (this.#queue.length > 0 && !this.#ended) {
      const slot = this.#slots.find((candidate) => candidate.busySince === undefined) ?? this.#another();
      if (slot === undefined) return;
      this.#send(slot, this.#queue.shift() as Wanted);
    }
  }

  /**
   * A new side connection when there is none, or when every one has carried its KILL for STUCK_KILL_MS (and
   * fewer than MAX_SIDE_CONNECTIONS are open); else `undefined`, with the queue tried again once the oldest KILL
   * in flight is held up.
   */
  #another(): Slot | undefined {
    if (this.#slots.length >= MAX_SIDE_CONNECTIONS) return undefined;
    const now = performance.now();
    const oldest = Math.min(...this.#slots.map((slot) => slot.busySince ?? now));
    if (this.#slots.length > 0 && now - oldest < STUCK_KILL_MS) {
      if (this.#retry === undefined) {
        this.#retry = setTimeout(
          () => {
            this.#retry = undefined;
            this.#pump();
          },
          STUCK_KILL_MS - (now - oldest),
        );
        this.#retry.unref();
      }
      return undefined;
    }
    return this.#open();
  }

  /** Carries `wanted` on `slot`; the slot takes the next one when done. */
  #send(slot: Slot, wanted: Wanted): void {
    slot.busySince = performance.now();
    clearTimeout(slot.idleTimer);
    void this.#attempt(slot, wanted).then((outcome) => {
      slot.busySince = undefined;
      if (outcome === undefined) {
        // Its side connection died under it: once more on another, unless that was the second.
        if (++wanted.failures < 2 && performance.now() < wanted.by) this.#queue.unshift(wanted);
        else wanted.settle('unreachable');
      } else {
        wanted.settle(outcome);
      }
      if (this.#slots.includes(slot)) this.#idleAfter(slot);
      this.#pump();
    });
  }

  /** One try on one side connection; `undefined` when that connection died (or failed to connect). */
  async #attempt(slot: Slot, wanted: Wanted): Promise<KillOutcome | undefined> {
    const { threadId, seen } = wanted;
    // Its time ran out as it was handed over: a bound of 0 would count against a healthy side connection.
    if (wanted.by - performance.now() <= 0) return 'unknown';
    let sent: Promise<unknown> | undefined;
    try {
      // Checked against the very connection the KILL goes out on: a new one may reach another run.
      const outcome = await within(
        slot.side.ready.then((opened): Promise<unknown> | typeof ELSEWHERE => {
          if (!opened.aim.reaches(seen)) return ELSEWHERE;
          // Outside the stopped request's context: with mysql2 instrumented, the KILL is a statement too, and
          // the request it is sent for has no time left.
          sent = outsideContext(() => opened.connection.query(`KILL QUERY ${threadId}`));
          return sent;
        }),
        wanted.by - performance.now(),
      );
      if (outcome === ELSEWHERE) return 'elsewhere';
      if (outcome !== TIMED_OUT) return 'killed';
      // Stuck: whatever it is waiting for, no KILL must wait behind it.
      if (sent === undefined) {
        this.#discard(slot);
        return 'unknown';
      }
      this.#retire(slot, threadId, sent);
      return 'held';
    } catch (error) {
      const errno = errnoOf(error);
      if (errno === ER_NO_SUCH_THREAD) return 'no-such-thread';
      // The server refused this KILL (not our thread, say): the side connection itself is fine.
      if (errno !== undefined && errno > 0 && !isFatal(error)) return 'unknown';
      // A failed connect, or a connection that died.
      this.#discard(slot);
      return undefined;
    }
  }

  #open(): Slot | undefined {
    if (this.#ended) return undefined;
    const slot: Slot = {
      side: this.#opener(this.#runs, () => this.#forget(slot)),
      busySince: undefined,
      idleTimer: undefined,
    };
    // A failed connect is reported to whoever awaits it; the next KILL opens a new one.
    slot.side.ready.catch(() => this.#forget(slot));
    this.#slots.push(slot);
    return slot;
  }

  /** A spare (any side connection but the last one open) closes after SPARE_IDLE_MS without a KILL. */
  #idleAfter(slot: Slot): void {
    clearTimeout(slot.idleTimer);
    slot.idleTimer = setTimeout(() => {
      if (slot.busySince !== undefined || this.#slots.length <= 1 || !this.#slots.includes(slot)) return;
      this.#forget(slot);
      void this.#close(slot);
    }, SPARE_IDLE_MS);
    slot.idleTimer.unref();
  }

  /** No longer handed KILLs (it closed, failed, or is being closed). */
  #forget(slot: Slot): void {
    clearTimeout(slot.idleTimer);
    const at = this.#slots.indexOf(slot);
    if (at >= 0) this.#slots.splice(at, 1);
  }

  /**
   * A side connection whose KILL the server holds up: it takes no other, and is closed once the server answers
   * that KILL, or destroyed after HELD_KILL_MS without an answer. Until then {@link held} tells the thread's
   * session to wait.
   */
  #retire(slot: Slot, threadId: number, sent: Promise<unknown>): void {
    this.#forget(slot);
    this.#retired.add(slot);
    // An error the server sent (no such thread, say) is an answer too; a connection that died gave none.
    const answered = sent.then(
      () => true,
      (error: unknown) => !isFatal(error) && (errnoOf(error) ?? 0) > 0,
    );
    const over = within(answered, HELD_KILL_MS).then((outcome) => {
      this.#retired.delete(slot);
      if (outcome === true) void this.#close(slot);
      else slot.side.destroy();
      return outcome === true;
    });
    // A KILL held up earlier for the same thread: both must be over.
    const earlier = this.#held.get(threadId);
    const all = earlier === undefined ? over : Promise.all([earlier, over]).then(([a, b]) => a && b);
    this.#held.set(threadId, all);
    void all.then(() => {
      if (this.#held.get(threadId) === all) this.#held.delete(threadId);
    });
  }

  #discard(slot: Slot): void {
    this.#forget(slot);
    slot.side.destroy();
  }

  /** A graceful close, so a KILL in flight on it completes; destroyed when it is not connected or will not close. */
  async #close(slot: Slot): Promise<void> {
    clearTimeout(slot.idleTimer);
    // Still connecting, or learning its run: no KILL was sent on it, nothing to wait for.
    if (!slot.side.connected) {
      slot.side.destroy();
      return;
    }
    try {
      const { connection } = await slot.side.ready;
      if ((await within(connection.end(), KILL_TIMEOUT_MS)) === TIMED_OUT) slot.side.destroy();
    } catch {
      slot.side.destroy(); // already gone
    }
  }
}
