/**
 * The side connection of a blocked connection: where `CLIENT UNBLOCK` and the push-back of a released pop go
 * (the blocked connection itself runs nothing until its command returns). Its options are ioredis's, chosen
 * for what it carries:
 *
 * - An UNBLOCK must be answered, or fail, while the command it was sent for is still the one to release. One
 *   held for a reconnect (ioredis's offline queue) or re-sent after one (`autoResendUnfulfilledCommands`) would
 *   arrive whenever the server is back, and release whatever is blocked then. So nothing is queued
 *   (`enableOfflineQueue: false`: a command is written at once or refused), nothing is re-sent, and a command
 *   in flight when the connection drops is rejected at the drop (`maxRetriesPerRequest: 0`), not held until
 *   the reconnect. The releaser itself waits for `ready` and asks again with the connection's current id.
 * - It always reconnects, with ioredis's default backoff, whatever the client's own `retryStrategy`: it lives
 *   as long as the client it serves, and is closed when that client ends.
 * - Its `'error'` listener is on before it first connects (`lazyConnect`), so no error of it ever reaches the
 *   process or the app's handlers; its socket is unref'd at each connect, so it never keeps the process alive.
 * - No `keyPrefix`: the keys it puts back come from replies, already prefixed.
 * - A name of its own (the client's, plus `:release`), so an operator can tell it apart in `CLIENT LIST`.
 */
import { outsideContext } from '@deadline/core/internal';
import type { ConnectionLike } from './types.js';

const noop = () => {};

/** ioredis's default reconnection backoff. */
const reconnectAfter = (attempt: number) => Math.min(attempt * 50, 2_000);

/** Opens the side connection of `connection`. @internal */
export function openSideConnection(connection: ConnectionLike): ConnectionLike {
  const name = (connection as { options?: { connectionName?: unknown } }).options?.connectionName;
  // Outside the request's context: a long-lived connection must not keep one request's context alive. The
  // connect too: with `lazyConnect` the socket is made by `connect()`, and its events (every reply, every
  // reconnect) run in the context it was made in.
  return outsideContext(() => {
    const side = connection.duplicate({
      keyPrefix: '',
      lazyConnect: true,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
      retryStrategy: reconnectAfter,
      connectionName: typeof name === 'string' && name !== '' ? `${name}:release` : 'deadline:release',
    });
    side.on('error', noop);
    side.on('connect', () => (side as unknown as { stream?: { unref?: () => void } }).stream?.unref?.());
    side.connect().catch(noop);
    return side;
  });
}
