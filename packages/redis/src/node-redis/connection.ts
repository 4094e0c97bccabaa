/**
 * A node-redis client as the releaser's port (connection.ts). node-redis settles what a dropped connection left
 * unanswered at the drop (rejected, never re-sent), emits `reconnecting` when it drops and `ready` once its
 * handshake is done, and answers a server error with an `ErrorReply`.
 *
 * Its side connection is a `duplicate()` of the client, with these options for what it carries:
 * - `disableOfflineQueue`: an UNBLOCK is written at once or refused, never held for a reconnect (it would release
 *   whatever is blocked when the server is back); a command in flight at a drop is rejected at it.
 * - It always reconnects, with a short backoff, whatever the client's own `reconnectStrategy`: it lives as long as
 *   the client it serves, and is closed when that client ends.
 * - Its `'error'` listener is on before it connects, so no error of it reaches the process or the app's handlers;
 *   its socket is unref'd, so it never keeps the process alive; it is made outside the request's context.
 * - No `keyPrefix` and no default command options: the keys it puts back come from replies, already prefixed.
 * - A name of its own (the client's, plus `:release`), so an operator can tell it apart in `CLIENT LIST`.
 */
import { outsideContext } from '@deadline/core/internal';
import type { RedisArgs, RedisConnection } from '../connection.js';
import type { NodeRedisArgs, NodeRedisCommandOptions, NodeRedisSelf } from './types.js';

type Send = (args: NodeRedisArgs, options?: NodeRedisCommandOptions) => Promise<unknown>;

const EVENTS = { drop: 'reconnecting', up: 'ready', ready: 'ready', end: 'end' } as const;
const noop = () => {};
const reconnectAfter = (retries: number) => Math.min(retries * 50, 2_000);

/** node-redis takes strings and Buffers only. */
const asArgs = (args: RedisArgs): NodeRedisArgs =>
  args.map((arg) => (typeof arg === 'number' ? String(arg) : arg)) as NodeRedisArgs;

/** Whether `error` is an `ErrorReply` (or a subclass: `SimpleError`, `BlobError`), found by its class's name. */
function isErrorReply(error: unknown): boolean {
  for (let proto = error; proto !== null && typeof proto === 'object'; proto = Object.getPrototypeOf(proto)) {
    if ((proto as { constructor?: { name?: unknown } }).constructor?.name === 'ErrorReply') return true;
  }
  return false;
}

/**
 * The port of `self`; `send` is its own, unbounded `sendCommand` and `duplicate` its own `duplicate`.
 * @internal
 */
export function nodeRedisConnection(
  self: NodeRedisSelf,
  send: Send,
  duplicate: (overrides: object) => NodeRedisSelf,
): RedisConnection {
  return {
    emitter: self,
    events: EVENTS,
    get ready() {
      return self.isReady;
    },
    get ended() {
      return !self.isOpen;
    },
    forgetsAtDrop: false,
    send: (args) => send(asArgs(args)),
    // Asked once the handshake is done, ahead of the commands queued while the server was away.
    askId: () => send(['CLIENT', 'ID'], { asap: true }),
    isRefusal: isErrorReply,
    openSide: () => openSide(self, duplicate),
    close: () => self.destroy(),
  };
}

function openSide(self: NodeRedisSelf, duplicate: (overrides: object) => NodeRedisSelf): RedisConnection {
  const name = self.options?.name;
  return outsideContext(() => {
    const side = duplicate({
      name: typeof name === 'string' && name !== '' ? `${name}:release` : 'deadline:release',
      disableOfflineQueue: true,
      keyPrefix: undefined,
      commandOptions: undefined,
      pingInterval: undefined,
      socket: { ...self.options?.socket, reconnectStrategy: reconnectAfter },
    });
    side.on('error', noop);
    side.unref();
    side.connect().catch(noop);
    const sideSelf = (side as unknown as { _self?: NodeRedisSelf })._self ?? side;
    return nodeRedisConnection(
      sideSelf,
      (args, options) => sideSelf.sendCommand(args, options),
      (o) => sideSelf.duplicate(o) as NodeRedisSelf,
    );
  });
}
