/**
 * The options every RPC client adapter takes (`@deadline/grpc`, `@deadline/connect`), checked once where they
 * enter: a bad value fails at startup, naming it. Each adapter documents them in its own words (its codes).
 */

import type { OutgoingCallOptions } from './call.js';
import type { CallGuard } from './call-guard.js';
import { MAX_TIMER_DELAY_MS } from './clock.js';
import { checkGuard, checkNumber, checkObject } from './validate.js';

/** What a client adapter is given. @internal */
export interface OutgoingLimits {
  marginMs?: number | undefined;
  minMs?: number | undefined;
  defaultMs?: number | undefined;
  circuitBreaker?: CallGuard | undefined;
}

/** The same, checked: the options of each `OutgoingCall` (but for its `maxMs`), and the breaker. @internal */
export interface ResolvedOutgoingLimits {
  /**
   * `marginMs`, `minMs` and `defaultMs`, only those given, and `propagates: 'trace'`: the RPC library writes the
   * budget in its own header (`grpc-timeout`, `Connect-Timeout-Ms`), from the timeout it is given.
   */
  callOptions: OutgoingCallOptions;
  /** The least a call may be given (ms): `minMs`, never below 1. */
  floorMs: number;
  defaultMs: number | undefined;
  guard: CallGuard | undefined;
}

/** @internal */
export function resolveOutgoingLimits(options: OutgoingLimits | undefined): ResolvedOutgoingLimits {
  checkObject('options', options);
  const marginMs = checkNumber('marginMs', options?.marginMs);
  const minMs = checkNumber('minMs', options?.minMs);
  const defaultMs = checkNumber('defaultMs', options?.defaultMs, { min: 1, max: MAX_TIMER_DELAY_MS });
  return {
    callOptions: {
      propagates: 'trace',
      ...(marginMs === undefined ? {} : { marginMs }),
      ...(minMs === undefined ? {} : { minMs }),
      ...(defaultMs === undefined ? {} : { defaultMs }),
    },
    floorMs: Math.max(1, minMs ?? 1),
    defaultMs,
    guard: checkGuard('circuitBreaker', options?.circuitBreaker),
  };
}
