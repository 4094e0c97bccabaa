/**
 * The one-method echo service of the RPC benchmarks, in both stacks, without code generation: for grpc-js a
 * service definition with JSON (de)serialisers, for Connect a schema built from a descriptor in code. Bare, or with
 * the library on the side named: the client (`withDeadline`), the server (`deadlineService`, `deadlineInterceptor`).
 */
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { create, createFileRegistry, type DescService } from '@bufbuild/protobuf';
import {
  type FieldDescriptorProto_Label,
  type FieldDescriptorProto_Type,
  FileDescriptorProtoSchema,
} from '@bufbuild/protobuf/wkt';
import { type Client, createClient, type Transport } from '@connectrpc/connect';
import { connectNodeAdapter, createGrpcTransport } from '@connectrpc/connect-node';
import { deadlineInterceptor, withDeadline as withConnectDeadline } from '@deadline/connect';
import { deadlineService, withDeadline as withGrpcDeadline } from '@deadline/grpc';
import grpc from '@grpc/grpc-js';

/** The message both ways: a small JSON object, as an RPC's payload often is. */
interface Ping {
  n: number;
}

const json = {
  serialize: (value: Ping) => Buffer.from(JSON.stringify(value)),
  deserialize: (bytes: Buffer) => JSON.parse(bytes.toString()) as Ping,
};

/** grpc-js: `/bench.Echo/Echo`, unary. */
export const GRPC_ECHO: grpc.ServiceDefinition = {
  echo: {
    path: '/bench.Echo/Echo',
    requestStream: false,
    responseStream: false,
    requestSerialize: json.serialize,
    requestDeserialize: json.deserialize,
    responseSerialize: json.serialize,
    responseDeserialize: json.deserialize,
  },
};
const GrpcEchoClient = grpc.makeGenericClientConstructor(GRPC_ECHO, 'Echo');

/** Connect: the same service, its schema built from a descriptor (one int32 field). */
export const CONNECT_ECHO: DescService = createFileRegistry(
  create(FileDescriptorProtoSchema, {
    name: 'bench/echo.proto',
    package: 'bench',
    syntax: 'proto3',
    messageType: [
      {
        name: 'Ping',
        field: [
          {
            name: 'n',
            number: 1,
            jsonName: 'n',
            type: 5 as FieldDescriptorProto_Type, // TYPE_INT32
            label: 1 as FieldDescriptorProto_Label, // LABEL_OPTIONAL
          },
        ],
      },
    ],
    service: [{ name: 'Echo', method: [{ name: 'Echo', inputType: '.bench.Ping', outputType: '.bench.Ping' }] }],
  }),
  () => undefined,
).getService('bench.Echo') as DescService;

/**
 * Where the library is used, in a server or a client of the benchmark. `deadline`: a bare client that gives each
 * call a deadline of its own (10 minutes), as the gRPC guide asks every caller to — the floor under the library's
 * client, which pays what a deadline costs grpc-js or Connect (a timer, the timeout header) as well as its own work.
 */
export type Side = 'bare' | 'deadline' | 'library';

/** The deadline of a `deadline` client's calls: far beyond any run, it never fires. */
const OWN_DEADLINE_MS = 600_000;

/** Starts the echo servers of both stacks, bare and with the library, on loopback; their ports by name. */
export async function startEchoServers(): Promise<Record<string, number>> {
  const ports: Record<string, number> = {};
  for (const side of ['bare', 'library'] as const) {
    const server = new grpc.Server();
    const handlers = {
      echo: (call: grpc.ServerUnaryCall<Ping, Ping>, callback: grpc.sendUnaryData<Ping>) =>
        callback(null, call.request),
    };
    server.addService(
      GRPC_ECHO,
      side === 'bare' ? handlers : deadlineService(GRPC_ECHO, handlers, { serviceName: 'echo' }),
    );
    ports[`grpc ${side}`] = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, port) =>
        error === null ? resolve(port) : reject(error),
      ),
    );
    const connect = http2.createServer(
      connectNodeAdapter({
        routes: (router) => router.service(CONNECT_ECHO, { echo: (ping: Ping) => ping } as never),
        interceptors: side === 'bare' ? [] : [deadlineInterceptor({ serviceName: 'echo' })],
      }),
    );
    await new Promise<void>((resolve) => connect.listen(0, '127.0.0.1', resolve));
    ports[`connect ${side}`] = (connect.address() as AddressInfo).port;
  }
  return ports;
}

/** One unary echo call, as the benchmark makes it. */
export type EchoCall = () => Promise<unknown>;

/** A client of the grpc-js echo server on `port`, its calls as promises. */
export function grpcEcho(port: number, side: Side): { call: EchoCall; close(): void } {
  const credentials = grpc.credentials.createInsecure();
  const options = side === 'library' ? withGrpcDeadline({}, { marginMs: 5 }) : {};
  const client = new GrpcEchoClient(`127.0.0.1:${port}`, credentials, options) as unknown as grpc.Client & {
    echo(ping: Ping, options: grpc.CallOptions, callback: (error: grpc.ServiceError | null, reply: Ping) => void): void;
  };
  const own = side === 'deadline';
  const call = () =>
    new Promise<Ping>((resolve, reject) =>
      client.echo({ n: 1 }, own ? { deadline: Date.now() + OWN_DEADLINE_MS } : {}, (error, reply) =>
        error === null ? resolve(reply) : reject(error),
      ),
    );
  return { call, close: () => client.close() };
}

/** A client of the Connect echo server on `port` (the gRPC protocol over HTTP/2). */
export function connectEcho(port: number, side: Side): { call: EchoCall; close(): void } {
  const bare: Transport = createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}` });
  const transport = side === 'library' ? withConnectDeadline(bare, { marginMs: 5 }) : bare;
  const client = createClient(CONNECT_ECHO, transport) as unknown as Client<DescService> & {
    echo(ping: Ping, options?: { timeoutMs?: number }): Promise<Ping>;
  };
  const options = side === 'deadline' ? { timeoutMs: OWN_DEADLINE_MS } : {};
  return { call: () => client.echo({ n: 1 }, options), close: () => {} };
}
