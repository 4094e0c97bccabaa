/**
 * An ioredis connection (a `Redis` client, or one node's inside a `Cluster`) as the releaser's port. ioredis
 * re-sends what a dropped connection left unanswered unless told not to (`autoResendUnfulfilledCommands`), so a
 * blocking command may come back on the new connection; its `ReplyError` is the server's refusal.
 */
import type { RedisArgs, RedisConnection } from '../connection.js';
import { openSideConnection } from './side-connection.js';
import type { ConnectionLike } from './types.js';

const EVENTS = { drop: 'close', up: 'connect', ready: 'ready', end: 'end' } as const;

/** @internal */
export function ioredisConnection(connection: ConnectionLike): RedisConnection {
  const send = ([name, ...rest]: RedisArgs) => connection.call(String(name), ...rest);
  return {
    emitter: connection,
    events: EVENTS,
    get ready() {
      return connection.status === 'ready';
    },
    get ended() {
      return connection.status === 'end';
    },
    get forgetsAtDrop() {
      const options = (connection as { options?: { autoResendUnfulfilledCommands?: unknown } }).options;
      return options?.autoResendUnfulfilledCommands === false;
    },
    send,
    // Asked at `connect`, while ioredis still only sends its handshake (CLIENT is one): ahead of what it re-sends.
    askId: () => send(['CLIENT', 'ID']),
    isRefusal: (error) => (error as { name?: unknown } | null)?.name === 'ReplyError',
    openSide: () => ioredisConnection(openSideConnection(connection)),
    close: () => connection.disconnect(),
  };
}
