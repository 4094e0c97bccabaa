/**
 * Waiting for a reconnecting client (an ioredis connection, say) to be ready again: the Redis adapter and the
 * BullMQ helpers both hold a command back, within its budget, rather than leave it in the client's offline
 * queue, which would send it whenever the server comes back — long after anyone waits.
 */

/** An emitter of `ready` (usable again) and `end` (given up for good). */
export interface ReadyEmitter {
  once(event: 'ready' | 'end', listener: () => void): unknown;
  off(event: 'ready' | 'end', listener: () => void): unknown;
}

/** One wait per client and reconnection, however many callers wait on it: no listener per command. */
const waits = new WeakMap<ReadyEmitter, Promise<void>>();

/** Resolves at the client's next `ready` or `end`. @internal */
export function nextReady(client: ReadyEmitter): Promise<void> {
  let wait = waits.get(client);
  if (wait === undefined) {
    wait = new Promise<void>((resolve) => {
      const done = () => {
        client.off('ready', done);
        client.off('end', done);
        waits.delete(client);
        resolve();
      };
      client.once('ready', done);
      client.once('end', done);
    });
    waits.set(client, wait);
  }
  return wait;
}
