/** A Connect transport whose calls follow the request's deadline. */

import { ConnectError, type Transport } from '@connectrpc/connect';
import { OutgoingCall, resolveOutgoingLimits, storage } from '@deadline/core/internal';
import type { ConnectClientDeadlineOptions } from './client-options.js';
import { codeOf } from './errors.js';
import { CallSignal, failed } from './outgoing.js';

type Method = Parameters<Transport['unary']>[0] | Parameters<Transport['stream']>[0];

/**
 * Wraps a Connect transport (`createGrpcTransport`, `createConnectTransport`, …) so that each call made inside a
 * deadline context gets the earlier of its own `timeoutMs` and the context's remaining time minus `marginMs` —
 * the timeout Connect writes in `grpc-timeout` / `Connect-Timeout-Ms` before any interceptor runs, and enforces —
 * is refused with `deadline_exceeded` without anything sent when too little is left, and is aborted when the
 * context stops. A stream is bounded as a whole: the call ends when its response has been read. Errors carry the
 * typed error that explains them as `cause`. Calls made outside any context pass through untouched (unless
 * `defaultMs` or `circuitBreaker` is set). Options are checked here, once.
 *
 * @example
 * ```ts
 * import { createClient } from '@connectrpc/connect';
 * import { createGrpcTransport } from '@connectrpc/connect-node';
 * import { withDeadline } from '@deadline/connect';
 * const transport = withDeadline(createGrpcTransport({ baseUrl: 'http://inventory:8080' }), { marginMs: 20 });
 * const inventory = createClient(InventoryService, transport);
 * // inside a request: the call's timeout is min(its own, remaining − 20 ms)
 * await inventory.reserve({ sku: 'A1' });
 * ```
 */
export function withDeadline(transport: Transport, options?: ConnectClientDeadlineOptions): Transport {
  const { callOptions, floorMs, defaultMs, guard } = resolveOutgoingLimits(options);
  /** The call for `method`, or `undefined` to pass it through untouched; throws the refusal when not to be made. */
  function start(method: Method, timeoutMs: number | undefined): OutgoingCall | undefined {
    const scope = storage.getStore();
    if (scope === undefined && defaultMs === undefined && guard === undefined) return undefined;
    // A timeout of the caller's own that is already (nearly) spent: Connect fails it as it would.
    if (timeoutMs !== undefined && timeoutMs < floorMs) return undefined;
    const own = timeoutMs === undefined ? callOptions : { ...callOptions, maxMs: timeoutMs };
    try {
      return OutgoingCall.start(`/${method.parent.typeName}/${method.name}`, own, guard, scope);
    } catch (reason) {
      throw new ConnectError(
        reason instanceof Error ? reason.message : String(reason),
        codeOf(reason),
        undefined,
        undefined,
        reason,
      );
    }
  }
  /** The caller's headers with the trace added (the budget goes in Connect's own timeout header); as given if none. */
  function headersFor(
    call: OutgoingCall,
    header: Parameters<Transport['unary']>[3],
  ): Parameters<Transport['unary']>[3] {
    let headers: Headers | undefined;
    for (const name in call.headers) {
      headers ??= new Headers(header);
      headers.set(name, call.headers[name] as string);
    }
    return headers ?? header;
  }
  return {
    async unary(method, signal, timeoutMs, header, input, contextValues) {
      const call = start(method, timeoutMs);
      if (call === undefined) return transport.unary(method, signal, timeoutMs, header, input, contextValues);
      // The context's signal only when the caller gave none: reading it makes it (and keeps the context's timer armed).
      const linked = new CallSignal(call, signal, signal === undefined ? storage.getStore()?.signal : undefined);
      try {
        const response = await transport.unary(
          method,
          linked.signal,
          call.timeoutMs,
          headersFor(call, header),
          input,
          contextValues,
        );
        call.end();
        return response;
      } catch (error) {
        throw failed(call, error);
      } finally {
        linked.dispose();
      }
    },
    async stream(method, signal, timeoutMs, header, input, contextValues) {
      const call = start(method, timeoutMs);
      if (call === undefined) return transport.stream(method, signal, timeoutMs, header, input, contextValues);
      // The context's signal only when the caller gave none: reading it makes it (and keeps the context's timer armed).
      const linked = new CallSignal(call, signal, signal === undefined ? storage.getStore()?.signal : undefined);
      let response: Awaited<ReturnType<Transport['stream']>>;
      try {
        response = await transport.stream(
          method,
          linked.signal,
          call.timeoutMs,
          headersFor(call, header),
          input,
          contextValues,
        );
      } catch (error) {
        linked.dispose();
        throw failed(call, error);
      }
      return { ...response, message: untilRead(response.message, call, linked) };
    },
  } as Transport;
}

/** The response's messages; the call ends (and unlinks) once they have been read, or reading stopped. */
async function* untilRead<T>(messages: AsyncIterable<T>, call: OutgoingCall, linked: CallSignal): AsyncGenerator<T> {
  try {
    yield* messages;
    call.end();
  } catch (error) {
    throw failed(call, error);
  } finally {
    // A reader that stops early (break, return) ends the call too: it is no longer wanted.
    call.end();
    linked.dispose();
  }
}
