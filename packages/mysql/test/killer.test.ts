/**
 * The side connection's bounds, against a server that accepts the connection and never says a word (a hung
 * server, a black-holed network): each KILL gives up in time, and every socket it opened is closed. And against
 * one that drops it before the handshake is done: the KILL gives up at once, and the process lives.
 */
import { once } from 'node:events';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { createPool } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KILL_TIMEOUT_MS, Killer } from '../src/killer.ts';
import { connectionConfigOf } from './support.ts';

describe('the side connection, against a server that never answers', () => {
  const server = createServer();
  const sockets: Socket[] = [];
  const closed: Promise<unknown>[] = [];
  let config: object;

  beforeAll(async () => {
    server.on('connection', (socket) => {
      sockets.push(socket);
      closed.push(once(socket, 'close'));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    // mysql2's own connect timeout is far away: the bound under test is ours.
    const pool = createPool({ host: '127.0.0.1', port, connectTimeout: 60_000 });
    config = connectionConfigOf(pool);
  });

  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    server.close();
  });

  it('each KILL gives up after KILL_TIMEOUT_MS; the stuck connection is destroyed, the next KILL opens another', async () => {
    const killer = new Killer(config);
    // No target connection was seen alive (`undefined`): the side connection never gets as far as asking.
    let start = performance.now();
    expect(await killer.kill(42, undefined)).toBe('unknown');
    expect(performance.now() - start).toBeGreaterThanOrEqual(KILL_TIMEOUT_MS - 5);
    expect(performance.now() - start).toBeLessThan(KILL_TIMEOUT_MS + 1_000);
    await closed[0];
    start = performance.now();
    expect(await killer.kill(42, undefined)).toBe('unknown');
    expect(performance.now() - start).toBeLessThan(KILL_TIMEOUT_MS + 1_000);
    await closed[1];
    expect(sockets).toHaveLength(2);
    await killer.end();
    expect(await killer.kill(42, undefined)).toBe('unknown'); // ended: nothing more is opened
    expect(sockets).toHaveLength(2);
  });

  it('end() while the side connection is still connecting closes it', async () => {
    const killer = new Killer(config);
    killer.prepare();
    await once(server, 'connection');
    const opened = sockets.length;
    await killer.end();
    await closed[opened - 1];
  });
});

describe('the side connection, against a server that drops it mid-handshake', () => {
  // A closed socket (FIN) and a reset one (RST): mysql2 reports each as an 'error' on a connection still
  // connecting, which would take the process down were nobody listening.
  it.each([
    ['closes', (socket: Socket) => socket.destroy()],
    ['resets', (socket: Socket) => socket.resetAndDestroy()],
  ])('a server that %s it: the KILL gives up after one more try, nothing reaches the process', async (_, drop) => {
    const server = createServer(drop);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const killer = new Killer(connectionConfigOf(createPool({ host: '127.0.0.1', port, connectTimeout: 60_000 })));
    let accepted = 0;
    server.on('connection', () => accepted++);
    try {
      const start = performance.now();
      expect(await killer.kill(42, undefined)).toBe('unknown');
      expect(performance.now() - start).toBeLessThan(KILL_TIMEOUT_MS);
      expect(accepted).toBe(2);
      expect(await killer.serverVersion()).toBeUndefined();
    } finally {
      await killer.end();
      server.close();
    }
  });
});
