import { once } from 'node:events';

/** Resolves with the signal's reason once it aborts (at once if it already has). */
export async function aborted(signal: AbortSignal): Promise<unknown> {
  if (!signal.aborted) await once(signal, 'abort');
  return signal.reason;
}
