/**
 * A blocking command (`BLPOP`, `XREAD … BLOCK`, …) through the wrapper. It takes its turn in its connection's
 * lane (one blocking command of ours on the wire at a time, so that an UNBLOCK only ever reaches the command it
 * was sent for), and under a deadline context:
 *
 * - its own timeout, when it comes before the budget, is kept to the millisecond here: Redis answers a
 *   blocking command's timeout only when its event loop next wakes, up to `1000 / hz` ms late (100 ms with the
 *   default `hz 10`), often after the request's deadline. At that timeout the caller gets the command's
 *   timeout reply (`null`) at once, and the command is released on the server — the same reply, a few ms
 *   sooner. Never before it: the server's own `null`, should it come first by our clock, waits for it. Not
 *   `WAIT`: its timeout reply is a count only the server knows, so its timeout is the server's.
 * - otherwise its timeout is clamped into the budget, and it is released when the request dies first. The
 *   server's timeout reply to the clamped timeout (a little before the deadline, so that it never crosses our
 *   timer) is the deadline's, not the command's: the caller gets the deadline error, at the deadline.
 *
 * Either way, an element popped in the race (its reply on the way when the caller was answered) is put back.
 */
import { DeadlineExceededError } from '@deadline/core';
import type { OutgoingCall } from '@deadline/core/internal';
import { timerDelay } from '@deadline/core/internal';
import { clampTimeout, isTimeoutReply, nullAtTimeout, ownTimeoutMs, withTimeoutMs } from './blocking.js';
import type { Turn } from './lane.js';
import type { Releaser, Sent } from './release.js';

type Args = (string | number | Buffer)[];
type Send = (args: unknown[]) => Promise<unknown>;

/** Where a blocking command goes, as its client routes it. @internal */
export interface BlockingRoute {
  /** Waits, within the call, until the client can tell which connection the command blocks (never rejects). */
  beforeRouting(call: OutgoingCall): Promise<void>;
  /** The releaser of the connection the command blocks; undefined when that cannot be told (not released early). */
  releaser(command: string, args: unknown[]): Releaser | undefined;
  /** Waits, within the call, until that connection can be written to (never rejects). */
  beforeWrite(call: OutgoingCall): Promise<void>;
}

/**
 * A clamped command's server-side timeout ends this much before the call's: the server answers "nothing came"
 * by itself, and the connection is never left blocked by a reply that crossed our own timer.
 */
const SERVER_EARLY_MS = 20;

/**
 * Outside a deadline context (and in callback style): the command as its client sends it — its timeout is its
 * own, nothing is released — only written in its turn, so that no UNBLOCK meant for another can reach it.
 * @internal
 */
export function blockingInTurn(route: BlockingRoute, command: string, args: unknown[], send: Send): Promise<unknown> {
  const releaser = route.releaser(command, args);
  return releaser === undefined ? send(args) : releaser.inTurn(() => send(args));
}

/** Under a deadline context: see the file's comment. @internal */
export function boundedBlocking(
  route: BlockingRoute,
  command: string,
  args: unknown[],
  send: Send,
  call: OutgoingCall,
): Promise<unknown> {
  const own = ownTimeoutMs(command, args as Args) ?? 0;
  // Its own timeout governs when it comes before the call's (a timeout of 0 is "forever").
  const exact = own > 0 && nullAtTimeout(command) && (call.timeoutMs === undefined || own < call.timeoutMs);
  return new Promise((resolve, reject) => {
    let answered = false;
    let stopped!: () => void;
    /** Settles when the caller is answered: what the command waits on before it is written stops waiting. */
    const answeredSignal = new Promise<void>((r) => {
      stopped = r;
    });
    let timer: NodeJS.Timeout | undefined;
    let releaser: Releaser | undefined;
    let turn: Turn | undefined;
    /** The command once written, until it has replied. */
    let sent: Sent | undefined;
    /** Its release, once started; its turn ends after both. */
    let releasing: Promise<void> = Promise.resolve();

    /** Answers the caller (before the command's reply); a command already written is released. */
    const answer = (settle: () => void) => {
      answered = true;
      clearTimeout(timer);
      stopped();
      settle();
      if (sent !== undefined && releaser !== undefined) {
        releasing = releaser.release(sent, () => call.confirmStop('CLIENT UNBLOCK'));
      } else if (sent === undefined) turn?.end();
    };
    call.onStop((error) => {
      if (answered) return;
      // Its own timeout comes before the deadline, always: a deadline stop means that it has passed, and only the
      // timers ran out of order (after a stalled loop Node runs due timers list by list, not by due time). The
      // caller gets its timeout's reply; the call's events still say what stopped it.
      if (exact && error instanceof DeadlineExceededError) {
        return answer(() => {
          call.end();
          resolve(null);
        });
      }
      answer(() => {
        call.end(error);
        reject(error);
      });
    });
    const onTimer = () => {
      if (answered) return;
      // Node's timers may fire a fraction of a millisecond early: never answer before the timeout has passed.
      if (call.elapsedMs() < own) return arm();
      answer(() => {
        call.end();
        resolve(null);
      });
    };
    const arm = () => {
      timer = setTimeout(onTimer, timerDelay(own - call.elapsedMs()));
      timer.unref();
    };
    if (exact) arm();

    const start = async () => {
      await route.beforeRouting(call);
      if (answered) return;
      releaser = route.releaser(command, args);
      if (releaser !== undefined) {
        turn = releaser.lane.enter();
        await Promise.race([turn.ready, answeredSignal]);
        if (answered) return;
        // The client may have dropped while the command waited for its turn.
        await route.beforeWrite(call);
        if (answered) return;
        await Promise.race([releaser.prepare(), answeredSignal]);
        if (answered) return;
      }
      const elapsed = call.elapsedMs();
      let a = args as Args;
      /** Whether its server-side timeout is the budget's rather than its own. */
      let clamped = false;
      if (exact) a = withTimeoutMs(command, a, own - elapsed);
      else if (call.timeoutMs !== undefined) {
        const budget = Math.max(1, call.timeoutMs - elapsed - SERVER_EARLY_MS);
        a = clampTimeout(command, a, budget);
        clamped = own === 0 || own > budget;
      }
      const reply = send(a);
      if (releaser !== undefined && turn !== undefined) {
        const held = turn;
        sent = releaser.track(reply);
        sent.settled.then(() => releasing).then(held.end);
      }
      reply.then(
        (value) => {
          // The server counts the timeout on its own clock (the wall clock, which the OS may step), not ours: a
          // `null` there before it has passed here waits for the timer armed for it, so it is never early.
          if (!answered && exact && value === null && call.elapsedMs() < own) return;
          // The budget's timeout: the call's stop, due within SERVER_EARLY_MS, answers with the deadline error.
          if (!answered && clamped && isTimeoutReply(command, a, value)) return;
          if (!answered) {
            answered = true;
            clearTimeout(timer);
            call.end();
            resolve(value);
            return;
          }
          // Answered before this reply came, with an element popped in the race: nobody will read it.
          void releaser?.pushBack(command, a, value);
        },
        (error: unknown) => {
          if (answered) return;
          answered = true;
          clearTimeout(timer);
          call.end(error);
          reject(error);
        },
      );
    };
    start().catch((error: unknown) => {
      if (answered) return;
      answer(() => {
        call.end(error);
        reject(error);
      });
    });
  });
}
