/**
 * A command or a batch under its call, whichever client sends it: not written without time left, nor left in the
 * client's offline queue while the server is away (it waits for the client, within the call, instead); the caller
 * answered at the stop. A reply that comes after it is left to the client, which still matches it to its command,
 * so the connection stays in step.
 */
import type { OutgoingCall } from '@deadline/core/internal';

/** @internal */
export function boundedSend<T>(
  call: OutgoingCall,
  beforeWrite: (call: OutgoingCall) => Promise<void>,
  send: () => Promise<T>,
): Promise<T> {
  const write = async () => {
    await beforeWrite(call);
    if (call.stopReason !== undefined) throw call.stopReason;
    return send();
  };
  return call.race(write).then(
    (value) => {
      call.end();
      return value;
    },
    (error: unknown) => {
      call.end(error);
      throw error;
    },
  );
}
