/**
 * The test service over real grpc-js on loopback: a server whose handlers record what their deadline context looked
 * like, and clients made with or without the library.
 */
import { fileURLToPath } from 'node:url';
import { currentContext } from '@deadline/core';
import grpc, { type ServiceError } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { expect } from 'vitest';
import { type RpcClientDriver, serviceOptionsOf } from '../../../test/support/rpc-client-conformance.ts';
import { detachedSeen, events, type Seen, seen } from '../../../test/support/rpc-seen.ts';
import { GRPC_JS_TIMER_LEAD_MS } from '../src/incoming-call.ts';
import {
  deadlineService,
  fromGrpcStatus,
  type GrpcClientDeadlineOptions,
  type GrpcServerCall,
  type GrpcServerDeadlineOptions,
  withDeadline,
} from '../src/index.ts';

const definition = loadSync(fileURLToPath(new URL('../../../test/fixtures/inventory.proto', import.meta.url)), {
  keepCase: false,
  defaults: true,
});
const loaded = grpc.loadPackageDefinition(definition) as unknown as {
  deadline: { test: { Inventory: grpc.ServiceClientConstructor } };
};
export const Inventory = loaded.deadline.test.Inventory;
export { events, next, type Seen, seen } from '../../../test/support/rpc-seen.ts';

type Callback = (error: unknown, value?: unknown) => void;
type Query = (sql: string) => Promise<{ rowCount: number | null }>;

/** The handlers, bare: what a service looks like before it adopts the library. */
export function implementation(query?: Query) {
  return {
    inspect(call: grpc.ServerUnaryCall<{ wait: boolean; detach: boolean }, Seen>, callback: Callback) {
      const context = currentContext();
      events.emit('inspect', context);
      const detached = call.request.detach ? detachedSeen() : {};
      if (!call.request.wait) {
        callback(null, seen(detached));
        return;
      }
      if (context === undefined) {
        // Served bare: nothing but the caller's cancellation ends the wait.
        call.once('cancelled', () => events.emit('stopped', 'cancelled'));
        return;
      }
      context.onStop((reason) => {
        events.emit('stopped', reason);
        callback(reason);
      });
    },
    async query(call: grpc.ServerUnaryCall<{ sql: string }, { count: number }>, callback: Callback) {
      try {
        const result = await (query as Query)(call.request.sql);
        callback(null, { count: result.rowCount ?? 0 });
      } catch (error) {
        events.emit('query-error', error);
        callback(error);
      }
    },
    ticks(call: grpc.ServerWritableStream<{ count: number; intervalMs: number }, { n: number }>) {
      let n = 0;
      const context = currentContext();
      const timer = setInterval(() => {
        n++;
        events.emit('tick', n);
        call.write({ n });
        if (call.request.count !== 0 && n >= call.request.count) {
          clearInterval(timer);
          call.end();
        }
      }, call.request.intervalMs);
      context?.onStop((reason) => {
        clearInterval(timer);
        events.emit('ticks-stopped', { reason, n });
      });
    },
    collect(call: grpc.ServerReadableStream<{ n: number }, Seen>, callback: Callback) {
      let count = 0;
      call.on('data', () => {
        count++;
        events.emit('collected', currentContext());
      });
      call.on('end', () => callback(null, seen({ count })));
    },
  };
}

export interface Served {
  address: string;
  server: grpc.Server;
  close(): Promise<void>;
}

/** Serves the test service on a loopback port: through `deadlineService` unless `options` is `false`. */
export async function serve(options: GrpcServerDeadlineOptions | false, query?: Query): Promise<Served> {
  const server = new grpc.Server();
  const handlers = implementation(query);
  server.addService(
    Inventory.service,
    (options === false
      ? handlers
      : deadlineService(Inventory.service, handlers, options)) as grpc.UntypedServiceImplementation,
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error === null ? resolve(bound) : reject(error),
    ),
  );
  return {
    address: `127.0.0.1:${port}`,
    server,
    close: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
  };
}

export type InventoryClient = grpc.Client & Record<string, (...args: unknown[]) => unknown>;

/** A client of the test service: through `withDeadline` unless `options` is `false`. */
export function client(
  address: string,
  options: GrpcClientDeadlineOptions | false = {},
  clientOptions: grpc.ClientOptions = {},
): InventoryClient {
  const credentials = grpc.credentials.createInsecure();
  return new Inventory(
    address,
    credentials,
    options === false ? clientOptions : withDeadline(clientOptions, options),
  ) as InventoryClient;
}

/** A unary call as a promise: the reply, or the ServiceError. `metadata`: headers to send, by name. */
export function unary<T>(
  client: InventoryClient,
  method: string,
  request: object,
  options: grpc.CallOptions = {},
  metadata: Record<string, string> = {},
): Promise<T> {
  const sent = new grpc.Metadata();
  for (const [name, value] of Object.entries(metadata)) sent.set(name, value);
  return new Promise<T>((resolve, reject) => {
    (client[method] as (...args: unknown[]) => unknown)(
      request,
      sent,
      options,
      (error: ServiceError | null, reply: T) => (error === null ? resolve(reply) : reject(error)),
    );
  });
}

/**
 * The least budget a handler can have been given for a call made inside a deadline of `budgetMs`, less the
 * client's `marginMs`: what was left when the call was sent, which was before now, less the lead the server keeps
 * on grpc-js's own timer. `started` is a `performance.now()` reading taken before that deadline began. A floor from
 * the run's own clock: a stall before the send lowers the budget sent and lengthens the time measured alike, so it
 * holds on a loaded machine, and is within a few ms of the budget on a quiet one (a fixed floor some 300 ms below
 * the budget broke under load). 2 ms for the roundings: grpc-js takes the deadline as a `Date` (whole ms of the wall
 * clock, read beside our monotonic one) and sends what is left of it in whole ms (a CI run saw 778 against a floor of
 * 778.06 with 1 ms allowed).
 */
export function leftAfter(budgetMs: number, started: number, marginMs = 0): number {
  return budgetMs - marginMs - GRPC_JS_TIMER_LEAD_MS - (performance.now() - started) - 2;
}

/** The shared RPC suites' driver (test/support/rpc-client-conformance.ts): the test service through grpc-js. */
export const grpcDriver: RpcClientDriver<InventoryClient> = {
  name: '@deadline/grpc (grpc-js)',
  serve: async (options) => {
    const served = await serve(
      options === false
        ? false
        : serviceOptionsOf<GrpcServerCall>(options, (call) => call.metadata.get('x-internal')[0] === '1'),
    );
    return { target: served.address, close: served.close };
  },
  client: (address, options) => client(address, options),
  close: (c) => c.close(),
  inspect: (c, request, options = {}) =>
    unary<Seen>(
      c,
      'inspect',
      request,
      options.timeoutMs === undefined ? {} : { deadline: Date.now() + options.timeoutMs },
      options.headers,
    ),
  collect: (c, items) =>
    new Promise<Seen>((resolve, reject) => {
      const call = (c.collect as (cb: (e: ServiceError | null, r: Seen) => void) => grpc.ClientWritableStream<unknown>)(
        (e, r) => (e === null ? resolve(r) : reject(e)),
      );
      for (const item of items) call.write(item);
      call.end();
    }),
  ticks: (c, request, onMessage = () => {}) =>
    new Promise((resolve) => {
      const stream = (c as unknown as { ticks(r: object): grpc.ClientReadableStream<{ n: number }> }).ticks(request);
      let received = 0;
      stream.on('data', (tick: { n: number }) => {
        received++;
        onMessage(tick.n, () => stream.cancel());
      });
      stream.on('error', (error: ServiceError) => resolve({ received, error }));
      stream.on('end', () => resolve({ received, error: undefined }));
    }),
  expectClientError: (error) => expect((error as ServiceError).metadata).toBeInstanceOf(grpc.Metadata),
  codeOf: (error) => (error as ServiceError).code,
  codes: { deadlineExceeded: grpc.status.DEADLINE_EXCEEDED, cancelled: grpc.status.CANCELLED },
  fromError: (error) => fromGrpcStatus(error as ServiceError),
  expectExceededBy: (error, hop) =>
    expect((error as ServiceError).metadata.get('x-deadline-exceeded-by')).toEqual([hop]),
  expectRefusedUnsent: (c) =>
    // Nothing was sent: the channel never even left IDLE to connect.
    expect(c.getChannel().getConnectivityState(false)).toBe(grpc.connectivityState.IDLE),
  log: { message: 'grpc call', ok: grpc.status.OK, deadlineExceeded: grpc.status.DEADLINE_EXCEEDED },
  leftAfter,
};
