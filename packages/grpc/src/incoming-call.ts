/**
 * A grpc-js server call as the core's `IncomingCall` reads it: its metadata as headers, its deadline (parsed by
 * grpc-js from `grpc-timeout`) as the protocol's own timeout, and its `'cancelled'` event as the caller going — or,
 * at the deadline, as grpc-js's own timer having answered it.
 */
import type { EventEmitter } from 'node:events';
import { IncomingCall, type ResolvedIncomingOptions } from '@deadline/core/internal';
import type { BudgetParser, HeaderSource } from '@deadline/core/wire';
import type { Metadata, MethodDefinition } from '@grpc/grpc-js';
import { type GrpcServerCall, msUntil } from './grpc-types.js';

/** Request metadata as the core reads headers. */
function headersOf(metadata: Metadata): HeaderSource {
  return {
    get(name: string) {
      const value = metadata.get(name)[0];
      return typeof value === 'string' ? value : undefined;
    },
  };
}

/**
 * How much earlier than grpc-js's own timer the handler's deadline falls, in ms. grpc-js answers the caller's deadline
 * itself when its timer fires: `DEADLINE_EXCEEDED`, without our `x-deadline-exceeded-by` trailer. Ours, which names
 * this hop, must be sent first (sending it clears grpc-js's timer). grpc-js arms its timer on the event loop's cached
 * clock, which lags the real one by however long the loop iteration that read the call's headers had already run, so
 * it fires up to that much before the deadline `getDeadline()` reports, itself in whole wall-clock milliseconds; our
 * context's timer fires on the real clock. On a machine that also runs the core's test suite, a lead of 5 ms let
 * grpc-js answer first in 3 calls of 400 (50 ms timeouts), 10 ms in none; with both cores kept busy by other
 * processes, 10 ms lost 2 of 200 and 20 ms none. Where grpc-js's answer does go first, the `'cancelled'` it then
 * emits still stops the handler's work as the deadline (`IncomingCall.callerLeft`): only the trailer is missing. The
 * lead also gives the answer its way back: it reaches a caller that waits before the caller's own timer fires.
 * @internal
 */
export const GRPC_JS_TIMER_LEAD_MS = 20;

/** @internal */
export function startCall(
  call: GrpcServerCall,
  method: Pick<MethodDefinition<unknown, unknown>, 'path' | 'requestStream' | 'responseStream'>,
  options: ResolvedIncomingOptions<GrpcServerCall>,
  parser: BudgetParser,
): IncomingCall<GrpcServerCall> {
  const incoming = new IncomingCall(
    {
      call,
      method: method.path,
      protocol: 'grpc',
      streaming: method.requestStream || method.responseStream,
      headers: headersOf(call.metadata),
      // grpc-js's own reading of `grpc-timeout`, which is what ends the call (see docs/guides/grpc.md for the values
      // it misreads); the metadata no longer holds the header.
      ownMs: msUntil(call.getDeadline()),
      leadMs: GRPC_JS_TIMER_LEAD_MS,
    },
    options,
    parser,
  );
  const context = incoming.context;
  // Listeners a handler puts on the call ('data', 'end', 'cancelled') run in its context, as its own code does.
  const emit = call.emit;
  call.emit = function emitInContext(this: GrpcServerCall, ...args: Parameters<typeof emit>) {
    return context.run(() => emit.apply(this, args));
  };
  // The client reset the stream, or grpc-js's own deadline timer answered the call: grpc-js says 'cancelled' for both.
  (call as EventEmitter).once('cancelled', () => incoming.callerLeft());
  return incoming;
}
