/**
 * One server connection as the releaser sees it, whichever client it belongs to: the releaser (release.ts) keeps
 * a blocked connection's id, opens its side connection, releases it and puts back what it popped, and it does so
 * through this port only. Each client translates its own into it: ioredis in ioredis/connection.ts, node-redis in
 * node-redis/connection.ts.
 */
import type { EventEmitter } from 'node:events';

/** A command's arguments, its name first (`['CLIENT', 'UNBLOCK', '7', 'TIMEOUT']`). @internal */
export type RedisArgs = readonly (string | number | Buffer)[];

/** The client's events that tell the releaser where the connection is. @internal */
export interface ConnectionEvents {
  /** The connection dropped: its id is no longer the server's. */
  readonly drop: string;
  /** A new connection is up: ask its id as soon as the client lets a command through. */
  readonly up: string;
  /** Usable again. */
  readonly ready: string;
  /** Closed for good. */
  readonly end: string;
}

/** @internal */
export interface RedisConnection {
  /** The client the events come from. */
  readonly emitter: EventEmitter;
  readonly events: ConnectionEvents;
  readonly ready: boolean;
  readonly ended: boolean;
  /**
   * Whether the client forgets a command written but unanswered when the connection drops: never settles it, never
   * sends it again (ioredis without `autoResendUnfulfilledCommands`). Otherwise it either settles it at the drop
   * (node-redis) or sends it again on the new connection (ioredis's default).
   */
  readonly forgetsAtDrop: boolean;
  /** Sends a command as the client would, outside any deadline (never bounded by this package). */
  send(args: RedisArgs): Promise<unknown>;
  /** Asks `CLIENT ID`, ahead of commands already waiting where the client allows it. */
  askId(): Promise<unknown>;
  /** Whether `error` is the server's answer (`-ERR`, `-NOPERM`): asking again would get the same. */
  isRefusal(error: unknown): boolean;
  /** Opens the side connection to the same server (see each client's side-connection options). */
  openSide(): RedisConnection;
  /** Closes this connection (a side connection, when the client it serves ends). */
  close(): void;
}
