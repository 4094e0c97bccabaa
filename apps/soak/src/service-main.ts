/**
 * One service of the soak in a process of its own: `node dist/service-main.js '<SoakServiceConfig as JSON>'`,
 * with an IPC channel. gateway, orders and inventory are the demo's services as they are; the worker runs
 * orders' BullMQ jobs. It sends `ready`, then answers the runner (soak-protocol.ts) and reports job ids in batches,
 * so that nothing it is asked to count stays in its own memory.
 *
 * The abort-listener count starts before anything else is loaded, so it sees every listener.
 */
import { EventEmitter } from 'node:events';
import { trackAbortListeners } from './abort-listeners.js';

trackAbortListeners();

/**
 * An `'error'` event nobody listens to is thrown where it is emitted, and its error's stack says where the error
 * was made (a driver's parser), not which emitter had no listener. Noted here, so an uncaught exception can name
 * the emitter and the code that emitted it.
 */
const unlistened = new WeakMap<object, string>();
const emit = EventEmitter.prototype.emit;
// `arguments`, not a rest parameter: every emit of the service goes through here, and should not allocate for it.
EventEmitter.prototype.emit = function emitNoting(this: EventEmitter, type: string | symbol, error?: unknown) {
  if (type === 'error' && this.listenerCount('error') === 0 && typeof error === 'object' && error !== null) {
    const where = (new Error().stack ?? '').split('\n').slice(2, 8).join(' ← ').replace(/\s+/g, ' ');
    unlistened.set(error, `an 'error' event on a ${this.constructor?.name ?? 'emitter'} with no listener, at ${where}`);
  }
  // biome-ignore lint/complexity/noArguments: forwards every argument without an array per emit (above)
  return emit.apply(this, arguments as unknown as Parameters<typeof emit>);
};

const unhandled: string[] = [];
// Counted, not fatal: the run's verdict names them, and the service keeps serving so the rest is measured too.
process.on('unhandledRejection', (reason) => unhandled.push(`unhandled rejection: ${describe(reason)}`));
process.on('uncaughtException', (error) => {
  const how = unlistened.get(error);
  unhandled.push(`uncaught exception: ${describe(error)}${how === undefined ? '' : ` (${how})`}`);
});

function describe(reason: unknown): string {
  return reason instanceof Error ? `${reason.name}: ${reason.message}` : String(reason);
}

const { runService } = await import('./service.js');
const config = JSON.parse(process.argv[2] ?? '{}');
runService(config, unhandled).catch((error: unknown) => {
  process.send?.({ type: 'failed', reason: describe(error) });
  process.exitCode = 1;
});
