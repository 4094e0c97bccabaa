/**
 * What the conformance suite needs from a server adapter: start a real listening server with the adapter and
 * some generic routes, translated into the host's idiom. Shared by the node:http, fastify and express tests.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import { Writable } from 'node:stream';
import type { DeadlineServerOptions, RequestDeadline } from '../src/index.ts';

/** What a generic route handler can do, whatever the host. */
export interface Io {
  deadline: RequestDeadline;
  /** The request body as a stream (POST with application/octet-stream), else undefined. */
  body: Readable | undefined;
  /** Answers with a JSON body, the host's way (fastify reply.send, express res.json, node res.end). */
  reply(status: number, body: unknown, headers?: Record<string, string>): void;
  /** Streams a text response the host's way; resolves when it is written. */
  stream(status: number, chunks: AsyncIterable<string>): Promise<void>;
  /** Streams server-sent events (`text/event-stream`, 200) the host's way; resolves when they are written. */
  events(chunks: AsyncIterable<string>): Promise<void>;
}

export type Handler = (io: Io) => Promise<void>;

export interface Route {
  method: 'GET' | 'POST';
  path: string;
  handler: Handler;
  /**
   * A long-lived route (SSE, long poll): each harness says so in its host's idiom — fastify `config: { deadline:
   * false }`, express `longLived()`, node:http the `longLived` option.
   */
  longLived?: boolean;
}

export interface LogLine {
  level: number;
  msg?: string;
  [field: string]: unknown;
}

export interface Running {
  url: string;
  logs: LogLine[];
  close(): Promise<void>;
}

export interface Harness {
  name: string;
  /** Whether a deadline error escaping a handler is answered with this project's JSON body (else the host's). */
  ownErrorBody: boolean;
  start(options: DeadlineServerOptions<never>, routes: Route[]): Promise<Running>;
}

/** A pino destination that keeps parsed lines in memory. */
export function memoryDestination(lines: LogLine[]): Writable {
  return new Writable({
    write(chunk, _encoding, done) {
      for (const text of String(chunk).split('\n')) if (text.trim() !== '') lines.push(JSON.parse(text));
      done();
    },
  });
}

/** Lines our server packages wrote. */
export function deadlineLines(logs: LogLine[]): LogLine[] {
  return logs.filter((line) => typeof line.msg === 'string' && line.msg.startsWith('deadline:'));
}

/**
 * The logged error messages that say something twice: pino's `err` serializer joins an error's message and its
 * causes' with ': ', so a message that repeats its cause's text shows a part twice.
 */
export function repeatedMessages(logs: LogLine[]): string[] {
  const repeated: string[] = [];
  for (const line of logs) {
    const message = (line.err as { message?: unknown } | undefined)?.message;
    if (typeof message !== 'string') continue;
    const parts = message.split(': ');
    if (new Set(parts).size !== parts.length) repeated.push(message);
  }
  return repeated;
}

/** Starts an app that listens the way Express's and Koa's do (`app.listen(port, host, callback)`) on a free port. */
export async function listenApp(app: {
  listen(port: number, host: string, callback: () => void): Server;
}): Promise<{ url: string; server: Server }> {
  const server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

/** Closes `server`, its kept-alive connections first. */
export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
}
