/**
 * A blocking command's own timeout is never answered early, even when the server's `null` comes first by this
 * process's clock. Redis counts the timeout on its wall clock, not ours; CI once saw its `null` before the timeout
 * had passed here (by how much was not recorded; exactness.test.ts now prints it). A proxy that shortens every
 * `BLPOP` timeout to 1 ms on its way to a real server makes that happen every time, by a wide margin.
 */
import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { runWithDeadline } from '@deadline/core';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { REDIS, requireService } from '../../../test/support/services.ts';
import { loopStalls } from '../../../test/support/settle.ts';
import { withDeadline } from '../src/index.ts';
import { canRunRedisServer, type PrivateRedis, startRedisServer } from './redis-server.ts';

const available = await requireService(REDIS);
const privateServers = available && (await canRunRedisServer());

/** A `BLPOP`'s timeout in seconds with decimals, as a RESP bulk string: `$5\r\n0.050\r\n`, `$4\r\n0.05\r\n`. */
const TIMEOUT_ARGUMENT = /\r\n\$\d+\r\n\d+\.\d+\r\n/g;

/**
 * A TCP proxy to `port` that rewrites the timeout of every `BLPOP` going through it to 1 ms (a bulk string of its
 * own length: the framing holds). The command and its reply are otherwise untouched.
 */
async function shorteningProxy(port: number) {
  let shortened = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(port, '127.0.0.1');
    sockets.add(client).add(upstream);
    client.on('data', (data: Buffer) => {
      const text = data.toString('latin1');
      if (!/blpop/i.test(text)) return upstream.write(data);
      upstream.write(
        Buffer.from(
          text.replace(TIMEOUT_ARGUMENT, () => {
            shortened++;
            return '\r\n$5\r\n0.001\r\n';
          }),
          'latin1',
        ),
      );
    });
    upstream.on('data', (data) => client.write(data));
    client.on('close', () => upstream.destroy()).on('error', () => {});
    upstream.on('close', () => client.destroy()).on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get shortened() {
      return shortened;
    },
    close() {
      server.close();
      for (const socket of sockets) socket.destroy();
    },
  };
}

describe.runIf(privateServers)("@deadline/redis: the server's null before the timeout has passed here", () => {
  const clients: Redis[] = [];
  let server: PrivateRedis | undefined;
  afterAll(async () => {
    for (const redis of clients) redis.disconnect();
    await server?.stop();
  });

  it('waits for the timeout: null never before it, though the server answered within a few ms', async () => {
    // hz 500: the server answers its 1 ms timeout within about 2 ms, not on a tick up to 100 ms away.
    server = await startRedisServer(['--hz', '500']);
    const proxy = await shorteningProxy(server.port);
    try {
      const plain = new Redis(proxy.url, { maxRetriesPerRequest: 1 });
      const wrapped = withDeadline(new Redis(proxy.url, { maxRetriesPerRequest: 1 }));
      clients.push(plain, wrapped);
      await Promise.all([plain.ping(), wrapped.ping()]);
      const key = `deadline:early-null:${process.pid}`;

      // Without the wrapper, the server's shortened timeout is what the caller gets: the proxy works.
      const bare: number[] = [];
      // Each less the longest this process stalled meanwhile: the server's answer waits for it to be read.
      const bareOwn: number[] = [];
      const stalls = loopStalls();
      try {
        for (let i = 0; i < 5; i++) {
          const started = performance.now();
          expect(await plain.blpop(key, 0.5)).toBeNull();
          const ended = performance.now();
          bare.push(ended - started);
          bareOwn.push(ended - started - stalls.longestBetween(started, ended));
        }
      } finally {
        stalls.stop();
      }
      // Through the wrapper, under a budget well above the timeout: null, and never before 500 ms.
      const wrappedMs: number[] = [];
      for (let i = 0; i < 5; i++) {
        const started = performance.now();
        expect(await runWithDeadline(5_000, () => wrapped.blpop(key, 0.5))).toBeNull();
        wrappedMs.push(performance.now() - started);
      }
      const figures = (ms: number[]) => `${Math.min(...ms).toFixed(1)} to ${Math.max(...ms).toFixed(1)} ms`;
      console.log(
        `BLPOP key 0.5, its timeout shortened to 1 ms on the way (${proxy.shortened} shortened): without the wrapper null after ${figures(bare)}; with it ${figures(wrappedMs)}`,
      );
      expect(proxy.shortened).toBe(10);
      // The server's answer comes within a few ms, this process's stalls aside: well before the 500 ms asked.
      expect(Math.max(...bareOwn)).toBeLessThan(500);
      expect(Math.min(...wrappedMs)).toBeGreaterThanOrEqual(500);
    } finally {
      proxy.close();
    }
  }, 30_000);
});
