/**
 * Releasing a blocked connection. Each server connection (an ioredis `Redis` client or one node's connection
 * inside a `Cluster`, a node-redis client or one of its cluster's or pool's) gets one releaser, which sees it
 * through the port of connection.ts: the lane its blocking commands take turns in, its connection id (asked again
 * each time it reconnects), and a side connection to the same server for `CLIENT UNBLOCK` and for putting back
 * what a released pop took.
 *
 * A release is kept at until the command it is for has replied, because the server may not hold that command
 * when the first UNBLOCK arrives: it may not have read it yet, or it may be about to get it again — ioredis
 * re-sends the commands a dropped connection left unanswered (`autoResendUnfulfilledCommands`), and a
 * blocking command re-sent that way blocks for its whole timeout again, on a connection with a new id. The
 * lane guarantees that whatever of ours an UNBLOCK reaches is the command it was sent for (see lane.ts).
 */

import { pushBackCommands } from './blocking.js';
import type { RedisConnection } from './connection.js';
import { Lane } from './lane.js';
import { firstOf } from './wait.js';

/** A command written on the connection, until it has replied — or never will. @internal */
export interface Sent {
  readonly settled: Promise<void>;
  readonly done: boolean;
}

/** The longest pause between two tries (an UNBLOCK that found nothing blocked, or was lost; a push-back lost). */
const MAX_PAUSE_MS = 50;
/** 1, 2, 4, … ms, up to {@link MAX_PAUSE_MS}. */
const nextPause = (ms: number) => Math.min(Math.max(1, ms * 2), MAX_PAUSE_MS);
/** A push-back lost again and again (each try waits for the side connection to be back) is given up at last. */
const MAX_PUSH_BACK_ATTEMPTS = 20;

/** What releases one connection when the command blocking it is no longer awaited. @internal */
export class Releaser {
  /** The connection's blocking commands, one on the wire at a time. */
  readonly lane = new Lane();
  readonly #connection: RedisConnection;
  /** The current connection's id, once asked; unset from its close to the next connect. */
  #id: Promise<number | undefined> | undefined;
  /** `CLIENT ID` was refused: nothing can be released. */
  #refused = false;
  #side: RedisConnection | undefined;

  constructor(connection: RedisConnection) {
    this.#connection = connection;
    const { emitter, events } = connection;
    emitter.on(events.drop, () => {
      this.#id = undefined;
    });
    // A new connection has a new id. Asked as soon as it is up, ahead of what the client sends again from the old
    // connection (a blocking command among it, behind which the question would wait).
    emitter.on(events.up, () => {
      if (this.#id === undefined && !this.#refused) this.#id = this.#askId();
    });
    // The side connection lives no longer than the connection it serves.
    emitter.on(events.end, () => {
      this.#side?.close();
      this.#side = undefined;
    });
  }

  /**
   * Before a blocking command that may have to be released: the connection's id (one round trip the first time
   * — never queued behind a blocking command of ours, as the caller holds the lane), and the side connection
   * opened ahead, so that a release is one write.
   */
  prepare(): Promise<number | undefined> {
    if (this.#side === undefined && !this.#connection.ended) this.#side = this.#connection.openSide();
    this.#id ??= this.#askId();
    return this.#id;
  }

  /**
   * Writes a command that blocks, or may (a pipeline holding one), in its turn, with nothing to release: the
   * turn ends when its reply has come. `wait` bounds the wait for the turn (a call's race); when it rejects,
   * the place is given up and nothing is written.
   */
  inTurn<T>(write: () => Promise<T>, wait: (ready: Promise<void>) => Promise<void> = (ready) => ready): Promise<T> {
    const turn = this.lane.enter();
    return wait(turn.ready).then(
      () => {
        const reply = write();
        this.track(reply).settled.then(turn.end);
        return reply;
      },
      (error: unknown) => {
        turn.end();
        throw error;
      },
    );
  }

  /** Follows `reply`, the promise of a command written now, to when it has replied or never will. */
  track(reply: Promise<unknown>): Sent {
    const connection = this.#connection;
    const drop = connection.events.drop;
    let done = false;
    let settle!: () => void;
    const settled = new Promise<void>((resolve) => {
      settle = resolve;
    });
    const finish = () => {
      if (done) return;
      done = true;
      connection.emitter.off(drop, finish);
      settle();
    };
    reply.then(finish, finish);
    // A client that forgets what a dropped connection left unanswered never settles it: from the drop on, it is
    // neither on the server nor coming back.
    if (connection.forgetsAtDrop && connection.ready) connection.emitter.once(drop, finish);
    return {
      settled,
      get done() {
        return done;
      },
    };
  }

  /**
   * Releases the command `sent`, written on this connection, whose caller no longer waits for it: `CLIENT
   * UNBLOCK <id> TIMEOUT`, so that it returns as if its timeout had passed — nothing popped — and the commands
   * behind it go ahead. Asked again while it has not replied: when the UNBLOCK found nothing blocked (the
   * server had not read it yet, or the connection dropped and the client is to re-send it), when the side
   * connection dropped with the UNBLOCK in flight (after it reconnects), and when the connection dropped after
   * the release (the re-sent command blocks anew, on the new connection, under its new id). Resolves once the
   * command has replied and no UNBLOCK sent for it is still unanswered; never rejects. `onReleased` is told
   * each time the server answers that it released the command.
   */
  async release(sent: Sent, onReleased?: () => void): Promise<void> {
    let pauseMs = 0;
    while (!sent.done) {
      const id = await this.#currentId(sent);
      const side = id === undefined ? undefined : await this.#readySide(sent.settled);
      if (sent.done || id === undefined || side === undefined) return;
      let released: number;
      try {
        released = Number(await side.send(['CLIENT', 'UNBLOCK', String(id), 'TIMEOUT']));
      } catch (error) {
        // Refused (the user lacks CLIENT UNBLOCK): the command ends at its own clamped timeout.
        if (side.isRefusal(error)) return;
        // Lost with the side connection (which never sends it again): asked again once it is back.
        // Its status may still say `ready` for a moment, its socket already gone: wait for an event or a pause,
        // never again at once, or this loop would spin without letting the close be seen.
        await firstOf(side.emitter, [side.events.ready], sent.settled, pauseMs);
        pauseMs = nextPause(pauseMs);
        continue;
      }
      if (released === 1) {
        // Its reply is on the way, unless the connection drops first and ioredis sends it again.
        onReleased?.();
        pauseMs = 0;
        await firstOf(this.#connection.emitter, [this.#connection.events.drop], sent.settled);
        continue;
      }
      // Nothing blocked: its reply is on the way, or the server has not read it (yet, or again).
      await firstOf(this.#connection.emitter, [this.#connection.events.ready], sent.settled, pauseMs);
      pauseMs = nextPause(pauseMs);
    }
  }

  /**
   * Puts back what a released pop took, on the side connection, at least once: a push-back lost with the side
   * connection may have been applied before the drop, and is sent again — an element twice beats an element
   * lost. A refusal (`WRONGTYPE`, an ACL) is final, and swallowed; so is the 20th loss in a row.
   */
  async pushBack(command: string, args: unknown[], reply: unknown): Promise<void> {
    for (const [name, ...rest] of pushBackCommands(command, args as never, reply)) {
      let pauseMs = 0;
      for (let attempt = 0; attempt < MAX_PUSH_BACK_ATTEMPTS; attempt++) {
        // Undefined once the client has ended: nothing left to put it back with.
        const side = await this.#readySide();
        if (side === undefined) return;
        try {
          await side.send([name, ...rest]);
          break;
        } catch (error) {
          if (side.isRefusal(error)) break;
          // As in release(): never again at once.
          await firstOf(side.emitter, [side.events.ready], undefined, pauseMs);
          pauseMs = nextPause(pauseMs);
        }
      }
    }
  }

  #askId(): Promise<number | undefined> {
    const asked: Promise<number | undefined> = this.#connection.askId().then(
      (id) => Number(id),
      (error: unknown) => {
        if (this.#connection.isRefusal(error)) this.#refused = true;
        // Dropped with the connection: asked again at its next connect.
        else if (this.#id === asked) this.#id = undefined;
        return undefined;
      },
    );
    return asked;
  }

  /** The current connection's id, waiting for the connection to be back when it is away; undefined: none to get. */
  async #currentId(sent: Sent): Promise<number | undefined> {
    for (;;) {
      const id = await this.#id;
      const connection = this.#connection;
      if (id !== undefined || this.#refused || sent.done || connection.ended) return id;
      await firstOf(connection.emitter, [connection.events.up, connection.events.end], sent.settled);
      // Listening to `connect` after the constructor's own listener: the new id is being asked by now.
    }
  }

  /**
   * The side connection once it is ready; undefined when `until` settles or the client ended first (its side
   * connection is then closed, which ends the wait).
   */
  async #readySide(until?: Promise<unknown>): Promise<RedisConnection | undefined> {
    let stopped = false;
    until?.then(
      () => (stopped = true),
      () => (stopped = true),
    );
    for (;;) {
      if (this.#connection.ended) return undefined;
      let side = this.#side;
      if (side === undefined || side.ended) side = this.#side = this.#connection.openSide();
      if (side.ready) return side;
      await firstOf(side.emitter, [side.events.ready, side.events.end], until);
      if (stopped) return undefined;
    }
  }
}

const releasers = new WeakMap<object, Releaser>();

/** The releaser of the connection `client` (its port made by `port` on first use). @internal */
export function releaserOf(client: object, port: () => RedisConnection): Releaser {
  let releaser = releasers.get(client);
  if (releaser === undefined) {
    releaser = new Releaser(port());
    releasers.set(client, releaser);
  }
  return releaser;
}
