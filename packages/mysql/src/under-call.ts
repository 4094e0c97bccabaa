/**
 * One outgoing call around some work: started before anything is asked of the pool (no time left → it throws
 * `DeadlineExceededError` `before-call`, or `CancelledError`, and nothing happens), ended with the work's outcome.
 */
import { OutgoingCall } from '@deadline/core/internal';
import type { Backend } from './backend.js';

/** @internal */
export async function underCall<T>(backend: Backend, work: (call: OutgoingCall) => Promise<T>): Promise<T> {
  const call = OutgoingCall.start(backend.target, backend.callOptions, backend.guard);
  // The side connection opens (and the flavour is learnt) while the pool checks out a connection.
  backend.prepare();
  try {
    const value = await work(call);
    call.end();
    return value;
  } catch (error) {
    call.end(error);
    throw error;
  }
}
