/**
 * Releasing a blocked connection. Each ioredis connection (a `Redis` client, or one node's connection inside a
 * `Cluster`) gets one releaser: its connection id, asked once per connection, and a side connection to the
 * same server for `CLIENT UNBLOCK` and for putting back what a released pop took.
 */
import { storage } from '@deadline/core/internal';
import { pushBackCommands } from './blocking.js';
import type { ConnectionLike, RedisLike } from './types.js';

/** What releases one connection when the command blocking it is no longer awaited. @internal */
export class Releaser {
  readonly #connection: ConnectionLike;
  #id: Promise<number | undefined> | undefined;
  #side: RedisLike | undefined;

  constructor(connection: ConnectionLike) {
    this.#connection = connection;
    // A new connection has a new id.
    connection.on('close', () => {
      this.#id = undefined;
    });
    // The side connection lives no longer than the connection it serves.
    connection.on('end', () => {
      this.#side?.disconnect();
      this.#side = undefined;
    });
  }

  /** The connection's `CLIENT ID`: asked before its first blocking command, so never queued behind one. */
  idOf(): Promise<number | undefined> {
    this.#id ??= this.#connection.call('client', 'id').then(
      (id) => Number(id),
      () => undefined,
    );
    return this.#id;
  }

  async unblock(id: Promise<number | undefined>): Promise<void> {
    const clientId = await id;
    if (clientId === undefined) return;
    // TIMEOUT: the command returns as if its own timeout passed (nothing popped), not with an error.
    await this.#sideConnection()
      .call('client', 'unblock', clientId, 'timeout')
      .catch(() => {});
  }

  async pushBack(command: string, args: unknown[], reply: unknown): Promise<void> {
    for (const [name, ...rest] of pushBackCommands(command, args as never, reply)) {
      await this.#sideConnection()
        .call(name, ...rest)
        .catch(() => {});
    }
  }

  #sideConnection(): RedisLike {
    let side = this.#side;
    if (side === undefined || side.status === 'end') {
      // Outside the request's context (a long-lived connection must not keep one request's context alive), and
      // without a keyPrefix: the keys it puts back come from replies, already prefixed.
      const created = storage.exit(() => this.#connection.duplicate({ keyPrefix: '' }));
      side = this.#side = created;
      // Never keeps the process alive, never reports on the app's error handlers.
      created.on('error', () => {});
      created.on('connect', () => (created as unknown as { stream?: { unref?: () => void } }).stream?.unref?.());
    }
    return side;
  }
}

const releasers = new WeakMap<ConnectionLike, Releaser>();

/** The releaser of `connection`, made on first use. @internal */
export function releaserOf(connection: ConnectionLike): Releaser {
  let releaser = releasers.get(connection);
  if (releaser === undefined) {
    releaser = new Releaser(connection);
    releasers.set(connection, releaser);
  }
  return releaser;
}
