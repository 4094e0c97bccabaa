/**
 * A grpc-js server call as the core's `IncomingCall` reads it: its metadata as headers, its deadline (parsed by
 * grpc-js from `grpc-timeout`) as the protocol's own timeout, and its `'cancelled'` event as the caller going.
 */
import type { EventEmitter } from 'node:events';
import { type BudgetParser, CancelledError, type HeaderSource } from '@deadline/core';
import { IncomingCall, type ResolvedIncomingOptions } from '@deadline/core/internal';
import type { Metadata } from '@grpc/grpc-js';
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

/** @internal */
export function startCall(
  call: GrpcServerCall,
  method: string,
  options: ResolvedIncomingOptions<GrpcServerCall>,
  parser: BudgetParser,
): IncomingCall<GrpcServerCall> {
  const incoming = new IncomingCall(
    { call, method, protocol: 'grpc', headers: headersOf(call.metadata), ownMs: msUntil(call.getDeadline()) },
    options,
    parser,
  );
  const context = incoming.context;
  // Listeners a handler puts on the call ('data', 'end', 'cancelled') run in its context, as its own code does.
  const emit = call.emit;
  call.emit = function emitInContext(this: GrpcServerCall, ...args: Parameters<typeof emit>) {
    return context.run(() => emit.apply(this, args));
  };
  (call as EventEmitter).once('cancelled', () =>
    context.cancel(new CancelledError(`the caller cancelled ${method}`, { reason: 'client-disconnected' })),
  );
  return incoming;
}
