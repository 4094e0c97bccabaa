/**
 * One blocking command on the wire per connection, in the order they were called.
 *
 * Why: `CLIENT UNBLOCK <id>` names a connection, not a command. It releases whatever is blocked on that
 * connection when it arrives, and the command it was sent for may have returned meanwhile (its reply crossed
 * the UNBLOCK on the way). Two ways out were weighed:
 *
 * - `CLIENT UNBLOCK <id> ERROR`, so that a released command's reply says so (`-UNBLOCKED`), each such reply
 *   matched to the UNBLOCK sent for it, and a command released by an UNBLOCK meant for another sent again with
 *   what is left of its timeout. The release still happens: the command loses its place among the clients
 *   blocked on its key, and it runs after the commands that were queued behind it. The matching spans two
 *   connections whose replies arrive in no fixed order, and a command written by the app on the client
 *   itself (not through the wrapper) would get an `UNBLOCKED` error it never asked for.
 * - Not writing a blocking command while an UNBLOCK that could reach it is unanswered. ioredis writes every
 *   command to the socket as it is called, so "unanswered" must cover the commands already written too: the
 *   next blocking command is written only once the one before it has replied and every UNBLOCK sent for it
 *   has been answered. Then, when an UNBLOCK reaches the server, the only blocking command of ours that can
 *   be blocked on that connection is the one it was sent for.
 *
 * The lane is the second. It costs nothing the server did not already impose: a connection blocked in one
 * command runs nothing else, so blocking commands on one connection never ran side by side. What changes is
 * where the next one waits: here (where a request that dies while waiting is simply never sent) rather than in
 * the server's input buffer (where its release would have hit the command ahead of it).
 */

/**
 * A place in the lane: `ready` resolves when it is this command's turn; `end()` gives the turn (or the place) up.
 * @internal
 */
export interface Turn {
  readonly ready: Promise<void>;
  /** Leaves the lane: the next command goes ahead. Idempotent; before `ready`, the place is given up. */
  end(): void;
}

/** @internal */
export class Lane {
  /** The places waiting for their turn, in call order (the one that has it is not among them). */
  readonly #waiting: { go: () => void }[] = [];
  /** Whether a place has the turn. */
  #busy = false;

  /** Takes a place at the end of the lane. */
  enter(): Turn {
    let go!: () => void;
    const ready = new Promise<void>((resolve) => {
      go = resolve;
    });
    const place = { go };
    let ended = false;
    let started = false;
    place.go = () => {
      started = true;
      go();
    };
    if (this.#busy) this.#waiting.push(place);
    else {
      this.#busy = true;
      place.go();
    }
    return {
      ready,
      end: () => {
        if (ended) return;
        ended = true;
        if (started) this.#next();
        else {
          const at = this.#waiting.indexOf(place);
          if (at !== -1) this.#waiting.splice(at, 1);
        }
      },
    };
  }

  #next(): void {
    const next = this.#waiting.shift();
    if (next === undefined) this.#busy = false;
    else next.go();
  }
}
