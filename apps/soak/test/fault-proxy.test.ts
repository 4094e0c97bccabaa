/**
 * The fault proxy on real loopback sockets, in front of an echo server: bytes pass unchanged and in order whatever
 * faults come and go (a property), a drip is slow, a hold holds, a cut resets, a target that is down is a reset.
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { untilTrue } from '../../../test/support/turns.ts';
import { FaultProxy, type LinkFault } from '../src/fault-proxy.ts';

let echo: Server;
let echoPort: number;

beforeAll(async () => {
  // Echoes every byte back, and ends its side when the client ends its own.
  echo = createServer({ allowHalfOpen: true }, (socket) => {
    socket.on('error', () => {});
    socket.pipe(socket);
  });
  echo.listen(0, '127.0.0.1');
  await once(echo, 'listening');
  echoPort = (echo.address() as AddressInfo).port;
});

afterAll(async () => {
  await new Promise((resolve) => echo.close(resolve));
});

/** A client through `proxy`, collecting what comes back; `ended` resolves with it all once the far side ended. */
async function client(proxy: FaultProxy): Promise<{ socket: Socket; received: () => Buffer; ended: Promise<Buffer> }> {
  const socket = connect({ host: '127.0.0.1', port: proxy.port, allowHalfOpen: true });
  await once(socket, 'connect');
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  const ended = new Promise<Buffer>((resolve, reject) => {
    socket.once('end', () => resolve(Buffer.concat(chunks)));
    socket.once('error', reject);
  });
  // A test that resets the connection does not wait for its end.
  ended.catch(() => {});
  return { socket, received: () => Buffer.concat(chunks), ended };
}

describe('FaultProxy', () => {
  it('passes bytes unchanged both ways, a megabyte and more (with back-pressure), then closes cleanly', async () => {
    const proxy = await FaultProxy.start({ host: '127.0.0.1', port: echoPort });
    try {
      const { socket, ended } = await client(proxy);
      const sent = randomBytes(3 << 20);
      socket.end(sent);
      expect((await ended).equals(sent)).toBe(true);
      await untilTrue(() => proxy.connections === 0);
      expect(proxy.accepted).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it('loses and reorders nothing, whatever faults come and go while it flows (property)', async () => {
    const fault = fc.oneof(
      fc.constant<LinkFault>({ kind: 'none' }),
      fc.constant<LinkFault>({ kind: 'hold' }),
      fc.record({
        kind: fc.constant('drip' as const),
        bytes: fc.integer({ min: 1, max: 4096 }),
        everyMs: fc.constant(1),
      }),
    );
    const step = fc.record({ chunk: fc.uint8Array({ minLength: 1, maxLength: 20_000 }), fault });
    const proxy = await FaultProxy.start({ host: '127.0.0.1', port: echoPort });
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), async (steps) => {
          const { socket, ended } = await client(proxy);
          for (const { chunk, fault: next } of steps) {
            proxy.set(next);
            socket.write(chunk);
            // Let the fault act on some of it before the next one comes.
            await new Promise((resolve) => setImmediate(resolve));
          }
          proxy.set({ kind: 'none' });
          socket.end();
          const back = await ended;
          expect(back.equals(Buffer.concat(steps.map((s) => s.chunk)))).toBe(true);
        }),
        { numRuns: 25 },
      );
    } finally {
      await proxy.close();
    }
  });

  it('a drip delivers every byte, no faster than it allows', async () => {
    const proxy = await FaultProxy.start({ host: '127.0.0.1', port: echoPort });
    try {
      proxy.set({ kind: 'drip', bytes: 20, everyMs: 10 });
      const { socket, ended } = await client(proxy);
      const sent = randomBytes(200);
      const started = performance.now();
      socket.end(sent);
      expect((await ended).equals(sent)).toBe(true);
      // 200 bytes at 20 a tick: ten ticks of 10 ms there (the way back follows a tick behind); a timer fires at most
      // about a millisecond early.
      expect(performance.now() - started).toBeGreaterThanOrEqual(90);
    } finally {
      await proxy.close();
    }
  });

  it('a hold delivers nothing and closes nothing until it is cleared, then everything, in order', async () => {
    const proxy = await FaultProxy.start({ host: '127.0.0.1', port: echoPort });
    try {
      const { socket, received, ended } = await client(proxy);
      proxy.set({ kind: 'hold' });
      const sent = randomBytes(50_000);
      socket.end(sent);
      // All of it reached the proxy and waits there; none came back, the connection is still open.
      await untilTrue(() => proxy.heldBytes === sent.length);
      expect(received().length).toBe(0);
      expect(proxy.connections).toBe(1);
      proxy.set({ kind: 'none' });
      expect((await ended).equals(sent)).toBe(true);
    } finally {
      await proxy.close();
    }
  });

  it('a cut resets every open connection; the next one is proxied as before', async () => {
    const proxy = await FaultProxy.start({ host: '127.0.0.1', port: echoPort });
    try {
      const first = await client(proxy);
      const second = await client(proxy);
      // A reset: 'error' (ECONNRESET), then 'close'.
      const closed = Promise.all(
        [first.socket, second.socket].map((socket) => {
          socket.on('error', () => {});
          return new Promise((resolve) => socket.once('close', resolve));
        }),
      );
      await untilTrue(() => proxy.connections === 2);
      proxy.cut();
      await closed;
      await untilTrue(() => proxy.connections === 0);
      const third = await client(proxy);
      third.socket.end(Buffer.from('after the cut'));
      expect((await third.ended).toString()).toBe('after the cut');
    } finally {
      await proxy.close();
    }
  });

  it('a target that is down: the client is reset at once, as by the server itself', async () => {
    const down = createServer();
    down.listen(0, '127.0.0.1');
    await once(down, 'listening');
    const port = (down.address() as AddressInfo).port;
    await new Promise((resolve) => down.close(resolve));
    const proxy = await FaultProxy.start({ host: '127.0.0.1', port });
    try {
      const socket = connect({ host: '127.0.0.1', port: proxy.port });
      socket.on('error', () => {});
      await new Promise((resolve) => socket.once('close', resolve));
      await untilTrue(() => proxy.connections === 0);
    } finally {
      await proxy.close();
    }
  });

  it('refuses a fault it cannot apply, naming what it takes', async () => {
    const proxy = await FaultProxy.start({ host: '127.0.0.1', port: echoPort });
    try {
      for (const bad of [
        { kind: 'drip', bytes: 0, everyMs: 10 },
        { kind: 'drip', bytes: 1.5, everyMs: 10 },
        { kind: 'slow' },
        null,
      ]) {
        expect(() => proxy.set(bad as LinkFault)).toThrow(/a link fault is/);
      }
      expect(proxy.fault).toEqual({ kind: 'none' });
    } finally {
      await proxy.close();
    }
  });
});
