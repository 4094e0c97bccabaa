/**
 * The side connection's bounds, against a server that accepts the connection and never says a word (a hung
 * server, a black-holed network): each KILL gives up in time, and every socket it opened is closed. Against one
 * that drops it before the handshake is done: the KILL gives up at once, and the process lives. And against the
 * real server holding one KILL up: the KILLs after it do not wait for it. And against a KILL that reaches the
 * server late, after its bound: the connection it names runs nothing until the server has answered it.
 */
import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { type Connection, createConnection, createPool, type RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MARIADB, requireService } from '../../../test/support/services.ts';
import { withDeadline } from '../src/index.ts';
import { HELD_KILL_MS, KILL_TIMEOUT_MS, Killer, STUCK_KILL_MS } from '../src/killer.ts';
import { mysql2Sides } from '../src/side-connection.ts';
import { sightingOf, watchForSighting } from '../src/sightings.ts';
import { oneCutterAtATime } from './one-cutter-at-a-time.ts';
import { connectionConfigOf, marker, serverOptions, Watcher } from './support.ts';

const ok = await requireService(MARIADB);
if (ok) oneCutterAtATime();

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
    const killer = new Killer(mysql2Sides(config));
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
    const killer = new Killer(mysql2Sides(config));
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
  ])(
    'a server that %s it: the KILL gives up after one more try (unreachable), nothing reaches the process',
    async (_, drop) => {
      const server = createServer(drop);
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      const { port } = server.address() as AddressInfo;
      const killer = new Killer(
        mysql2Sides(connectionConfigOf(createPool({ host: '127.0.0.1', port, connectTimeout: 60_000 }))),
      );
      let accepted = 0;
      server.on('connection', () => accepted++);
      try {
        const start = performance.now();
        expect(await killer.kill(42, undefined)).toBe('unreachable');
        expect(performance.now() - start).toBeLessThan(KILL_TIMEOUT_MS);
        expect(accepted).toBe(2);
        expect(await killer.serverVersion()).toBeUndefined();
      } finally {
        await killer.end();
        server.close();
      }
    },
  );
});

/**
 * A TCP proxy in front of the test server that forwards everything, except the server's answers on a connection
 * once it has sent `KILL QUERY <held>`: those are kept back until the connection closes, as a server holding
 * that KILL up would (MariaDB waits for the mutex its target waits on). The KILL itself reaches the server.
 */
async function holdingProxy(): Promise<{
  server: Server;
  port: number;
  hold(threadId: number): void;
  opened(): number;
}> {
  const options = serverOptions();
  let held: string | undefined;
  let opened = 0;
  const server = createServer((client) => {
    opened++;
    const upstream = connect(options.port as number, options.host as string);
    let holding = false;
    client.on('data', (data) => {
      if (held !== undefined && data.includes(held)) holding = true;
      upstream.write(data);
    });
    upstream.on('data', (data) => {
      if (!holding) client.write(data);
    });
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('close', close).on('error', close);
    upstream.on('close', close).on('error', close);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    server,
    port: (server.address() as AddressInfo).port,
    hold: (threadId) => {
      held = `KILL QUERY ${threadId}`;
    },
    opened: () => opened,
  };
}

describe.runIf(ok)('KILLs when the server holds one up (MariaDB, through a proxy)', () => {
  it('the next KILL goes out on another side connection at once; the one held up gives up at its bound', async () => {
    const proxy = await holdingProxy();
    const watcher = await Watcher.open();
    const through = serverOptions({ host: '127.0.0.1', port: proxy.port });
    const killer = new Killer(mysql2Sides(connectionConfigOf(createPool(through))));
    const targets: Connection[] = [];
    try {
      // Two connections through the proxy, seen alive at the peer the side connections reach, each sleeping.
      for (let i = 0; i < 2; i++) {
        const connection = await createConnection(through);
        watchForSighting(connection);
        await connection.query('SELECT 1');
        targets.push(connection);
      }
      const [held, next] = targets as [Connection, Connection];
      const marks = [marker(), marker()] as const;
      const sleeps = targets.map((connection, i) =>
        connection.query(`SELECT SLEEP(5) /* ${marks[i]} */`).catch((error: unknown) => error),
      );
      await Promise.all(marks.map((mark) => watcher.waitRunning(mark)));
      killer.prepare();
      expect(await killer.serverVersion()).toMatch(/MariaDB/i); // the first side connection is open
      proxy.hold(held.threadId);

      const start = performance.now();
      const first = killer
        .kill(held.threadId, sightingOf(held))
        .then((outcome) => ({ outcome, at: performance.now() }));
      const second = await killer.kill(next.threadId, sightingOf(next));
      const secondMs = performance.now() - start;
      expect(second).toBe('killed');
      // It waited for the first one to be held up for STUCK_KILL_MS, then for a connection of its own.
      expect(secondMs).toBeGreaterThanOrEqual(STUCK_KILL_MS - 5);
      expect(secondMs).toBeLessThan(STUCK_KILL_MS + 1_000);
      await watcher.waitGone(marks[1]);
      expect(proxy.opened()).toBe(2 + 2); // the two targets, the first side connection and one more

      // Sent, and not answered: the server may still carry it out (held() says when it has).
      const { outcome, at } = await first;
      expect(outcome).toBe('held');
      expect(at - start).toBeGreaterThanOrEqual(KILL_TIMEOUT_MS - 5);
      expect(at - start).toBeLessThan(KILL_TIMEOUT_MS + 1_000);
      // The server did carry it out: only its answer was held back.
      await watcher.waitGone(marks[0]);
      await Promise.all(sleeps);
      console.log(
        `a KILL held up: the next one answered after ${secondMs.toFixed(1)} ms (on a second side connection), ` +
          `the held one gave up after ${(at - start).toFixed(1)} ms`,
      );
      // The side connection it was stuck on carries no other: a later KILL goes on the healthy one, nothing new opened.
      expect(await killer.kill(next.threadId, sightingOf(next))).toBe('killed');
      expect(proxy.opened()).toBe(4);
    } finally {
      await killer.end();
      for (const connection of targets) connection.destroy();
      await watcher.end();
      proxy.server.close();
    }
  });

  it("a pool's connection whose KILL is held up is destroyed once its statement is over, not held for the KILL", async () => {
    const proxy = await holdingProxy();
    const watcher = await Watcher.open();
    const db = withDeadline(createPool(serverOptions({ host: '127.0.0.1', port: proxy.port, connectionLimit: 1 })));
    try {
      const [[first]] = await db.query<RowDataPacket[]>('SELECT CONNECTION_ID() AS id');
      proxy.hold(Number(first?.id));
      const mark = marker();
      const start = performance.now();
      // Stopped at 100 ms: the KILL reaches the server (the statement ends) but its answer is held back.
      await expect(runWithDeadline(100, () => db.query(`SELECT SLEEP(5) /* ${mark} */`))).rejects.toBeInstanceOf(
        DeadlineExceededError,
      );
      await watcher.waitGone(mark);
      // The only connection comes back as a new one well before the held KILL gives up (KILL_TIMEOUT_MS).
      const [[next]] = await runWithDeadline(5_000, () => db.query<RowDataPacket[]>('SELECT CONNECTION_ID() AS id'));
      const servedMs = performance.now() - start;
      expect(Number(next?.id)).not.toBe(Number(first?.id));
      expect(servedMs).toBeLessThan(KILL_TIMEOUT_MS);
      console.log(
        `a KILL held up: the pool served the next call on a new connection ${servedMs.toFixed(1)} ms after the first began`,
      );
    } finally {
      await db.end();
      await watcher.end();
      proxy.server.close();
    }
  });
});

/**
 * A TCP proxy in front of the test server that forwards everything, except that what a client sends once it has
 * sent `KILL QUERY <delayed>` reaches the server `delayMs` later (or never, with `Infinity`), as on a server that
 * holds the KILL up before carrying it out. A client that closes meanwhile still has what it sent delivered.
 */
async function delayingProxy(delayMs: number): Promise<{ port: number; delay(threadId: number): void; close(): void }> {
  const options = serverOptions();
  let delayed: string | undefined;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(options.port as number, options.host as string);
    sockets.add(client).add(upstream);
    let behind: Promise<void> | undefined;
    client.on('data', (data) => {
      if (behind === undefined && delayed !== undefined && data.includes(delayed)) {
        behind = new Promise((resolve) => {
          if (Number.isFinite(delayMs)) setTimeout(resolve, delayMs);
        });
      }
      if (behind === undefined) upstream.write(data);
      else void behind.then(() => upstream.write(data));
    });
    upstream.on('data', (data) => client.write(data));
    client.on('close', () => void (behind ?? Promise.resolve()).then(() => upstream.end()));
    client.on('error', () => {});
    upstream.on('close', () => client.destroy()).on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    port: (server.address() as AddressInfo).port,
    delay: (threadId) => {
      delayed = `KILL QUERY ${threadId}`;
    },
    // Its sockets too: a server's 'close' waits for its connections, and one held forever would never end.
    close: () => {
      server.close();
      for (const socket of sockets) socket.destroy();
    },
  };
}

describe.runIf(ok)('a KILL the server carries out after its bound (MariaDB, through a proxy)', () => {
  it('the next statement on the connection waits for the late KILL to be answered, and is not stopped by it', async () => {
    // The KILL reaches the server 1.5 s after it gave up waiting (KILL_TIMEOUT_MS).
    const proxy = await delayingProxy(KILL_TIMEOUT_MS + 1_500);
    const watcher = await Watcher.open();
    const db = withDeadline(await createConnection(serverOptions({ host: '127.0.0.1', port: proxy.port })));
    try {
      await db.query('SELECT 1'); // seen alive: a KILL may name it
      proxy.delay(db.connection.threadId);
      const mark = marker();
      const cutAt = performance.now();
      // Stopped at 100 ms; the server's own limit (the belt) ends the statement a moment later.
      await expect(runWithDeadline(100, () => db.query(`SELECT SLEEP(5) /* ${mark} */`))).rejects.toBeInstanceOf(
        DeadlineExceededError,
      );
      await watcher.waitGone(mark);
      // Asked for at once, with time enough: it is sent once the server has answered the KILL, and runs its whole
      // 2 s. Sent when the KILL gave up, the KILL would reach it 1.5 s in and cut it short (SLEEP answers 1).
      const [[row]] = await runWithDeadline(10_000, () => db.query<RowDataPacket[]>('SELECT SLEEP(2) AS slept'));
      const answeredMs = performance.now() - cutAt;
      expect(Number(row?.slept)).toBe(0);
      expect(answeredMs).toBeGreaterThanOrEqual(KILL_TIMEOUT_MS + 1_500 + 2_000);
      console.log(
        `a KILL carried out late: the next statement ran whole, answered ${answeredMs.toFixed(0)} ms after the cut`,
      );
    } finally {
      await db.end().catch(() => {});
      await watcher.end();
      proxy.close();
    }
  }, 20_000);

  it('a KILL never answered: the connection is closed after HELD_KILL_MS, and its next statement fails at once', async () => {
    const proxy = await delayingProxy(Number.POSITIVE_INFINITY);
    const db = withDeadline(await createConnection(serverOptions({ host: '127.0.0.1', port: proxy.port })));
    try {
      await db.query('SELECT 1');
      proxy.delay(db.connection.threadId);
      const cutAt = performance.now();
      await expect(runWithDeadline(100, () => db.query('SELECT SLEEP(5)'))).rejects.toBeInstanceOf(
        DeadlineExceededError,
      );
      // Waits behind the KILL, then finds its connection closed: the driver's error, not a stray KILL's.
      const error = await runWithDeadline(30_000, () => db.query('SELECT SLEEP(2)')).catch((caught: unknown) => caught);
      const failedMs = performance.now() - cutAt;
      expect((error as { fatal?: unknown }).fatal, String(error)).toBe(true);
      expect(failedMs).toBeGreaterThanOrEqual(KILL_TIMEOUT_MS + HELD_KILL_MS - 100);
      expect(failedMs).toBeLessThan(KILL_TIMEOUT_MS + HELD_KILL_MS + 3_000);
      console.log(
        `a KILL never answered: the connection was closed, its next statement failed ${failedMs.toFixed(0)} ms after the cut`,
      );
    } finally {
      await db.end().catch(() => {});
      proxy.close();
    }
  }, 30_000);
});
