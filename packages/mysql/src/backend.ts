/**
 * What every connection of one wrapped pool (or one wrapped connection) shares: the call's target and options,
 * the side connection that sends KILLs, and the server's flavour, learnt once.
 */
import type { CallGuard, OutgoingCallOptions } from '@deadline/core/internal';
import type { Connection } from 'mysql2/promise';
import { type Flavour, flavourOf } from './flavour.js';
import { Killer } from './killer.js';
import type { ResolvedOptions } from './options.js';
import type { SideOpener } from './side-connection.js';

/** mysql2 keeps the server's handshake on its connection (a private field, there since mysql2's first versions). */
type WithHandshake = { connection?: { _handshakePacket?: { serverVersion?: unknown } | null } };

/** @internal */
export class Backend {
  readonly target: string;
  readonly callOptions: OutgoingCallOptions;
  /** The circuit breaker every statement asks first, if one was given. */
  readonly guard: CallGuard | undefined;
  readonly killer: Killer;
  #flavour: Flavour | undefined;
  #detecting = false;

  /** `openSide`: how the driver opens a side connection for KILLs (side-connection.ts). */
  constructor(options: ResolvedOptions, openSide: SideOpener) {
    this.target = options.target;
    this.callOptions = options.call;
    this.guard = options.guard;
    this.killer = new Killer(openSide);
  }

  /**
   * The server's flavour: known after the first statement, from the handshake of the connection it ran on. Until
   * then (and if mysql2 ever stops keeping the handshake, until the side connection has told it), `undefined`:
   * the statement goes without the belt, the KILL still bounds it. A statement never waits for it.
   */
  flavourFor(connection: Connection): Flavour | undefined {
    if (this.#flavour === undefined) {
      const version = (connection as unknown as WithHandshake).connection?._handshakePacket?.serverVersion;
      if (typeof version === 'string') this.#flavour = flavourOf(version);
    }
    return this.#flavour;
  }

  /**
   * Opens the side connection unless it is open: called when a statement is about to run under a deadline, so
   * the connection is ready before a KILL is needed, opened while the pool checks out a connection rather than
   * at the deadline. Its handshake also tells the flavour, if nothing has yet.
   */
  prepare(): void {
    if (this.#flavour !== undefined || this.#detecting) {
      this.killer.prepare();
      return;
    }
    this.#detecting = true;
    void this.killer.serverVersion().then((version) => {
      this.#detecting = false; // unknown (no connection): asked again next time
      if (version !== undefined && this.#flavour === undefined) this.#flavour = flavourOf(version);
    });
  }
}
