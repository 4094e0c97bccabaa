/**
 * A grpc-js `Channel` whose calls follow the request's deadline. It sits below every interceptor — grpc-js asks the
 * channel for each call with the deadline the call options and interceptors settled on — so per-call
 * `interceptors`, which replace a client's own, cannot leave a call unbounded.
 */
import { OutgoingCall, type ResolvedOutgoingLimits, resolveOutgoingLimits, storage } from '@deadline/core/internal';
import type { ChannelInterface } from '@grpc/grpc-js';
import type { GrpcClientDeadlineOptions } from './client-options.js';
import { DeadlineCall } from './deadline-call.js';
import type { ChannelCall, GrpcDeadline } from './grpc-types.js';
import { msUntil } from './grpc-types.js';
import { RefusedCall } from './refused-call.js';

/**
 * Wraps a grpc-js channel so that each call made inside a deadline context gets the earlier of its own deadline
 * and the context's remaining time minus `marginMs`, is refused with `DEADLINE_EXCEEDED` without anything sent
 * when too little is left, and is cancelled when the context stops. Calls made outside any context pass through
 * untouched (unless `defaultMs` or `circuitBreaker` is set). {@link withDeadline} builds one for a client.
 *
 * @example
 * ```ts
 * import { Channel, credentials } from '@grpc/grpc-js';
 * import { DeadlineChannel } from '@deadline/grpc';
 * const channel = new DeadlineChannel(new Channel('inventory:50051', credentials.createInsecure(), {}), { marginMs: 20 });
 * const inventory = new InventoryClient('inventory:50051', credentials.createInsecure(), { channelOverride: channel });
 * ```
 */
export class DeadlineChannel implements ChannelInterface {
  readonly #inner: ChannelInterface;
  readonly #limits: ResolvedOutgoingLimits;

  constructor(channel: ChannelInterface, options?: GrpcClientDeadlineOptions) {
    this.#inner = channel;
    this.#limits = resolveOutgoingLimits(options);
  }

  createCall(
    method: string,
    deadline: GrpcDeadline,
    host: string | null | undefined,
    parentCall: Parameters<ChannelInterface['createCall']>[3],
    propagateFlags: number | null | undefined,
  ): ChannelCall {
    const scope = storage.getStore();
    const { guard, defaultMs, floorMs, callOptions } = this.#limits;
    const ownMs = msUntil(deadline);
    // Nothing to follow, or a deadline of the caller's own that is already (nearly) spent: grpc-js's call as is.
    if ((scope === undefined && defaultMs === undefined && guard === undefined) || ownMs < floorMs) {
      return this.#inner.createCall(method, deadline, host, parentCall, propagateFlags);
    }
    let call: OutgoingCall;
    try {
      const options = ownMs === Number.POSITIVE_INFINITY ? callOptions : { ...callOptions, maxMs: ownMs };
      call = OutgoingCall.start(method, options, guard, scope);
    } catch (reason) {
      return new RefusedCall(reason);
    }
    const timeoutMs = call.timeoutMs;
    const callDeadline = timeoutMs === undefined ? deadline : Date.now() + timeoutMs;
    let inner: ChannelCall;
    try {
      inner = this.#inner.createCall(method, callDeadline, host, parentCall, propagateFlags);
    } catch (error) {
      call.end(error);
      throw error;
    }
    return new DeadlineCall(inner, call);
  }

  close(): void {
    this.#inner.close();
  }
  getTarget(): string {
    return this.#inner.getTarget();
  }
  getConnectivityState(tryToConnect: boolean): ReturnType<ChannelInterface['getConnectivityState']> {
    return this.#inner.getConnectivityState(tryToConnect);
  }
  watchConnectivityState(...args: Parameters<ChannelInterface['watchConnectivityState']>): void {
    this.#inner.watchConnectivityState(...args);
  }
  getChannelzRef(): ReturnType<ChannelInterface['getChannelzRef']> {
    return this.#inner.getChannelzRef();
  }
}
