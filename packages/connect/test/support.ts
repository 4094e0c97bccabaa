/**
 * The test service over real Connect on `node:http2` (connect-node), on loopback: its schema read from the same
 * .proto as the gRPC tests' (no code generation), handlers that record what their deadline context looked like,
 * and transports (gRPC and Connect protocols) with or without the library.
 */
import { once } from 'node:events';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { createFileRegistry, type DescService, fromBinary } from '@bufbuild/protobuf';
import { FileDescriptorSetSchema } from '@bufbuild/protobuf/wkt';
import {
  type Client,
  Code,
  ConnectError,
  type ConnectRouter,
  createClient,
  type HandlerContext,
  type Transport,
} from '@connectrpc/connect';
import { connectNodeAdapter, createConnectTransport, createGrpcTransport } from '@connectrpc/connect-node';
import { currentContext } from '@deadline/core';
import protobuf from 'protobufjs';
import descriptor from 'protobufjs/ext/descriptor/index.js';
import { expect } from 'vitest';
import { type RpcClientDriver, serviceOptionsOf } from '../../../test/support/rpc-client-conformance.ts';
import { detachedSeen, events, type Seen, seen } from '../../../test/support/rpc-seen.ts';
import {
  type ConnectClientDeadlineOptions,
  type ConnectRequest,
  type ConnectServerDeadlineOptions,
  deadlineInterceptor,
  fromConnectError,
  withDeadline,
} from '../src/index.ts';

const root = protobuf.loadSync(fileURLToPath(new URL('../../../test/fixtures/inventory.proto', import.meta.url)));
const files = descriptor.FileDescriptorSet.encode(
  (root as unknown as { toDescriptor(syntax: string): protobuf.Message }).toDescriptor('proto3'),
).finish();

export { events, next, type Seen } from '../../../test/support/rpc-seen.ts';
export const Inventory = createFileRegistry(fromBinary(FileDescriptorSetSchema, files)).getService(
  'deadline.test.Inventory',
) as DescService;

type Query = (sql: string) => Promise<{ rowCount: number | null }>;

/** The handlers, Connect's way: the signal in `ctx` says when to stop. `query`: how the `Query` rpc runs its SQL. */
const routes = (query?: Query) => (router: ConnectRouter) => {
  router.service(Inventory, {
    async inspect(req: { wait: boolean; detach: boolean }, ctx: HandlerContext) {
      events.emit('inspect', currentContext());
      const detached = req.detach ? detachedSeen() : {};
      if (req.wait) {
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
        events.emit('stopped', currentContext()?.stopReason ?? ctx.signal.reason);
        throw ctx.signal.reason;
      }
      return seen(detached);
    },
    async query(req: { sql: string }) {
      try {
        const result = await (query as Query)(req.sql);
        return { count: result.rowCount ?? 0 };
      } catch (error) {
        events.emit('query-error', error);
        throw error;
      }
    },
    async *ticks(req: { count: number; intervalMs: number }, ctx: HandlerContext) {
      let n = 0;
      try {
        while (req.count === 0 || n < req.count) {
          await sleep(req.intervalMs, undefined, { signal: ctx.signal });
          n++;
          events.emit('tick', n, (currentContext() as unknown as { _listeners?: unknown[] })._listeners?.length ?? 0);
          yield { n };
        }
      } finally {
        events.emit('ticks-stopped', { reason: currentContext()?.stopReason ?? ctx.signal.reason, n });
      }
    },
    async collect(requests: AsyncIterable<{ n: number }>) {
      let count = 0;
      for await (const _ of requests) {
        count++;
        events.emit('collected', currentContext());
      }
      return seen({ count });
    },
  } as never);
};

export interface Served {
  baseUrl: string;
  close(): Promise<void>;
}

/** Serves the test service on `node:http2`: through `deadlineInterceptor` unless `options` is `false`. */
export async function serve(options: ConnectServerDeadlineOptions | false, query?: Query): Promise<Served> {
  const server = http2.createServer(
    connectNodeAdapter({
      routes: routes(query),
      interceptors: options === false ? [] : [deadlineInterceptor(options)],
    }),
  );
  const open = new Set<http2.ServerHttp2Session>();
  sessions.set(server, open);
  server.on('session', (session) => {
    open.add(session);
    session.once('close', () => open.delete(session));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Sessions a client keeps open would hold close() until they idle out.
        for (const session of sessions.get(server) ?? []) session.destroy();
      }),
  };
}
const sessions = new WeakMap<http2.Http2Server, Set<http2.ServerHttp2Session>>();

export type Protocol = 'grpc' | 'connect';
export type InventoryClient = Client<typeof Inventory> & Record<string, (...args: never[]) => unknown>;

/** A transport of the test service: through `withDeadline` unless `options` is `false`. */
export function transport(
  baseUrl: string,
  protocol: Protocol,
  options: ConnectClientDeadlineOptions | false = {},
): Transport {
  const bare =
    protocol === 'grpc' ? createGrpcTransport({ baseUrl }) : createConnectTransport({ baseUrl, httpVersion: '2' });
  return options === false ? bare : withDeadline(bare, options);
}

export function client(baseUrl: string, protocol: Protocol, options: ConnectClientDeadlineOptions | false = {}) {
  return createClient(Inventory, transport(baseUrl, protocol, options)) as unknown as InventoryClient & {
    inspect(
      req: object,
      options?: { timeoutMs?: number; signal?: AbortSignal; headers?: Record<string, string> },
    ): Promise<Seen>;
    ticks(req: object, options?: { timeoutMs?: number; signal?: AbortSignal }): AsyncIterable<{ n: number }>;
    collect(req: AsyncIterable<object>, options?: { timeoutMs?: number }): Promise<Seen>;
  };
}

/**
 * The least budget a call made inside a deadline of `budgetMs` can have carried, less the client's `marginMs`:
 * what was left when it was sent, which was before now. `started` is a `performance.now()` reading taken before
 * that deadline began. A floor from the run's own clock: a stall before the send lowers the budget sent and
 * lengthens the time measured alike, so it holds on a loaded machine, and is within a few ms of the budget on a
 * quiet one (a fixed floor some 300 ms below the budget broke under load). 1 ms for the wire's rounding.
 */
export function leftAfter(budgetMs: number, started: number, marginMs = 0): number {
  return budgetMs - marginMs - (performance.now() - started) - 1;
}

/** The shared RPC suites' driver (test/support/rpc-client-conformance.ts): the test service through Connect. */
export function connectDriver(protocol: Protocol): RpcClientDriver<ReturnType<typeof client>> {
  return {
    name: `@deadline/connect over the ${protocol} protocol`,
    serve: async (options) => {
      const served = await serve(
        options === false
          ? false
          : serviceOptionsOf<ConnectRequest>(options, (req) => req.header.get('x-internal') === '1'),
      );
      return { target: served.baseUrl, close: served.close };
    },
    client: (baseUrl, options) => client(baseUrl, protocol, options),
    close: () => {},
    inspect: (c, request, options) => c.inspect(request, options),
    collect: (c, items) => {
      async function* sent() {
        yield* items;
      }
      return c.collect(sent());
    },
    ticks: async (c, request, onMessage = () => {}) => {
      const controller = new AbortController();
      let received = 0;
      try {
        for await (const tick of c.ticks(request, { signal: controller.signal })) {
          received++;
          onMessage(tick.n, () => controller.abort());
        }
        return { received, error: undefined };
      } catch (error) {
        return { received, error };
      }
    },
    expectClientError: (error) => expect(error).toBeInstanceOf(ConnectError),
    codeOf: (error) => (error as ConnectError).code,
    codes: { deadlineExceeded: Code.DeadlineExceeded, cancelled: Code.Canceled },
    fromError: (error) => fromConnectError(error as ConnectError),
    expectExceededBy: (error, hop) => expect((error as ConnectError).metadata.get('x-deadline-exceeded-by')).toBe(hop),
    expectRefusedUnsent: (_, error) => expect(error).toBeInstanceOf(ConnectError),
    log: { message: 'connect call', ok: 'ok', deadlineExceeded: 'DeadlineExceeded' },
    leftAfter,
  };
}
