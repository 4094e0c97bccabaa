/**
 * Downstream servers on loopback that behave well or badly, each recording what it saw: connections opened
 * and closed, request headers. Tests wait on these events; none sleeps to synchronise.
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { type AddressInfo, createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { afterEach } from 'vitest';

export interface Downstream {
  url: string;
  /** Sockets accepted so far. */
  connections: number;
  /** Headers of each request, in order. */
  requests: IncomingHttpHeaders[];
  /** Resolves when the next (or an already pending) socket closes from the client's side. */
  nextClose(): Promise<void>;
  /** Resolves when a request has arrived (the n-th, 1-based). */
  arrived(n?: number): Promise<IncomingHttpHeaders>;
  close(): Promise<void>;
}

export type Behaviour = (socket: Socket, headers: IncomingHttpHeaders, raw: string) => void;

/**
 * A raw TCP server speaking just enough HTTP/1.1 to misbehave precisely: `behaviour` runs once a request's
 * head has arrived.
 */
export async function rawDownstream(behaviour: Behaviour): Promise<Downstream> {
  const sockets = new Set<Socket>();
  const closes: (() => void)[] = [];
  let closedUnclaimed = 0;
  const requests: IncomingHttpHeaders[] = [];
  const waiters: [number, (h: IncomingHttpHeaders) => void][] = [];
  const server: NetServer = createNetServer((socket) => {
    state.connections++;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => {
      sockets.delete(socket);
      const resolve = closes.shift();
      if (resolve) resolve();
      else closedUnclaimed++;
    });
    // Requests without bodies, one after the other on a kept-alive socket.
    let buffered = '';
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1');
      for (let end = buffered.indexOf('\r\n\r\n'); end !== -1; end = buffered.indexOf('\r\n\r\n')) {
        const head = buffered.slice(0, end);
        buffered = buffered.slice(end + 4);
        onRequest(socket, head);
      }
    });
  });
  const onRequest = (socket: Socket, head: string) => {
    {
      const headers = parseHead(head);
      requests.push(headers);
      for (let i = waiters.length - 1; i >= 0; i--) {
        const [n, resolve] = waiters[i] as [number, (h: IncomingHttpHeaders) => void];
        if (requests.length >= n) {
          waiters.splice(i, 1);
          resolve(requests[n - 1] as IncomingHttpHeaders);
        }
      }
      behaviour(socket, headers, head);
    }
  };
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const state: Downstream = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections: 0,
    requests,
    nextClose() {
      if (closedUnclaimed > 0) {
        closedUnclaimed--;
        return Promise.resolve();
      }
      return new Promise((resolve) => closes.push(resolve));
    },
    arrived(n = 1) {
      if (requests.length >= n) return Promise.resolve(requests[n - 1] as IncomingHttpHeaders);
      return new Promise((resolve) => waiters.push([n, resolve]));
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      server.close();
      await once(server, 'close');
    },
  };
  return state;
}

function parseHead(head: string): IncomingHttpHeaders {
  const headers: Record<string, string | string[]> = {};
  for (const line of head.split('\r\n').slice(1)) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    const existing = headers[name];
    headers[name] = existing === undefined ? value : [...(Array.isArray(existing) ? existing : [existing]), value];
  }
  return headers;
}

/** Answers 200 with the request's headers as JSON. */
export const echo: Behaviour = (socket, headers) => {
  const body = JSON.stringify(headers);
  socket.write(
    `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
};

/** Accepts and never answers. */
export const silent: Behaviour = () => {};

/** Sends the status line and headers, then one byte every `everyMs`, forever: no single read ever times out. */
export function drip(everyMs = 100): Behaviour {
  return (socket) => {
    socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n');
    const timer = setInterval(() => socket.write('1\r\nx\r\n'), everyMs);
    socket.on('close', () => clearInterval(timer));
  };
}

/** Sends headers and part of a declared body, then resets the connection. */
export const resetMidBody: Behaviour = (socket) => {
  socket.write('HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\npartial', () => socket.resetAndDestroy());
};

/** Answers 504 naming `hop` as the one whose deadline fired, with our JSON body. */
export function exceededBy(hop: string): Behaviour {
  return (socket) => {
    const body = JSON.stringify({ error: 'deadline_exceeded', budgetMs: 100, elapsedMs: 101, exceededBy: hop });
    socket.write(
      `HTTP/1.1 504 Gateway Timeout\r\ncontent-type: application/json\r\nx-deadline-exceeded-by: ${hop}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  };
}

/** A node:http server for the cases where a real HTTP implementation matters. */
export async function httpServer(
  handler: Parameters<typeof createServer>[1],
): Promise<{ url: string; server: Server; close(): Promise<void> }> {
  const server = createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}

/** A port nothing listens on. */
export async function refusedUrl(): Promise<string> {
  const server = createNetServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  server.close();
  await once(server, 'close');
  return `http://127.0.0.1:${port}`;
}

/** Registers an `afterEach` that closes them, and returns the function that starts one for a test. */
export function downstreamsPerTest(): (behaviour: Behaviour) => Promise<Downstream> {
  const open: Downstream[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((d) => d.close()));
  });
  return async (behaviour) => {
    const server = await rawDownstream(behaviour);
    open.push(server);
    return server;
  };
}

/**
 * The least budget a call made inside a deadline of `budgetMs` can have sent: what was left when it was sent, which
 * was before now. `started` is a `performance.now()` reading taken before that deadline began. A floor from the
 * run's own clock: a stall before the send lowers the budget sent and lengthens the time measured alike, so it holds
 * on a loaded machine, and is within a few ms of the budget on a quiet one (a fixed floor some 300 ms below the
 * budget broke under load). 1 ms for the header's whole milliseconds.
 */
export function leftAfter(budgetMs: number, started: number): number {
  return budgetMs - (performance.now() - started) - 1;
}
