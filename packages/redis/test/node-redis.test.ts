/**
 * What only node-redis needs: the client is bounded in place (the same object back, its options changed by a
 * second call), the caller's own `abortSignal` and `typeMapping` still apply inside a request, a `connect()` made
 * inside a request does not tie the socket to it, and the app's `'error'` listener — added through the object
 * `createClient()` hands out, whose prototype is the client — survives the waits this package adds on the client.
 */
import { currentContext, DeadlineExceededError, InvalidArgumentError, runWithDeadline } from '@deadline/core';
import { Redis } from 'ioredis';
import { createClient, RESP_TYPES } from 'redis';
import { afterAll, describe, expect, it } from 'vitest';
import { watchProcess } from '../../../test/support/process-watch.ts';
import { REDIS, requireService } from '../../../test/support/services.ts';
import { withDeadline } from '../src/index.ts';
import { killNamed, untilNamed } from './connections.ts';

const available = await requireService(REDIS);
const closers: (() => unknown)[] = [];
let number = 0;
const key = () => `deadline:node-redis:${process.pid}:${++number}`;

async function connected(name?: string) {
  const client = createClient({ url: REDIS.url, ...(name === undefined ? {} : { name }) });
  client.on('error', () => {});
  closers.push(() => client.destroy());
  return client.connect();
}

describe.runIf(available)('@deadline/redis on node-redis: in place', () => {
  afterAll(() => {
    for (const close of closers) close();
  });

  it('something that is no client: a clear error naming what it takes', () => {
    for (const value of [undefined, {}, { sendCommand() {} }, 'redis://127.0.0.1:6379']) {
      expect(() => withDeadline(value as never)).toThrow(
        new InvalidArgumentError(
          'redis',
          'an ioredis Redis or Cluster, or a node-redis client, cluster, pool or Sentinel',
          value,
        ),
      );
    }
  });

  it('returns the client itself; a second call changes its options', async () => {
    const client = await connected();
    expect(withDeadline(client, { name: 'first' })).toBe(client);
    withDeadline(client, { name: 'second' });
    const error = await runWithDeadline(0.5, () => client.get(key())).catch((e: unknown) => e);
    expect(error).toMatchObject({ phase: 'before-call', target: 'second GET' });
  });

  it("the caller's own abortSignal and typeMapping still apply inside a request", async () => {
    const client = withDeadline(await connected());
    const k = key();
    await client.set(k, 'v');
    const buffers = await runWithDeadline(2_000, () =>
      client.withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer }).get(k),
    );
    expect(buffers).toEqual(Buffer.from('v'));
    const controller = new AbortController();
    controller.abort();
    const error = await runWithDeadline(2_000, () => client.withAbortSignal(controller.signal).get(k)).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(Error);
    expect(error).not.toBeInstanceOf(DeadlineExceededError);
    expect((error as Error).message).toMatch(/abort/i);
  });

  it('connected inside a request, its socket runs its events outside it, reconnects included', async () => {
    const name = `deadline-node-redis-ctx-${process.pid}`;
    const client = createClient({ url: REDIS.url, name });
    client.on('error', () => {});
    closers.push(() => client.destroy());
    withDeadline(client);
    const seen = await runWithDeadline(5_000, async () => {
      const ready = new Promise((resolve) => client.once('ready', () => resolve(currentContext())));
      await client.connect();
      return ready;
    });
    expect(seen).toBeUndefined();
    const admin = new Redis(REDIS.url);
    closers.push(() => admin.disconnect());
    const reconnected = new Promise((resolve) => client.once('ready', () => resolve(currentContext())));
    const [id] = await killNamed(admin, name);
    await untilNamed(admin, name, [id as string]);
    expect(await reconnected).toBeUndefined();
  });

  it("the app's 'error' listener survives the waits for ready: a dropped connection never reaches the process", async () => {
    const name = `deadline-node-redis-listener-${process.pid}`;
    const errors: string[] = [];
    const client = createClient({ url: REDIS.url, name, socket: { reconnectStrategy: () => 20 } });
    client.on('error', (error: Error) => errors.push(error.message));
    closers.push(() => client.destroy());
    withDeadline(await client.connect());
    const admin = new Redis(REDIS.url);
    closers.push(() => admin.disconnect());
    const watch = watchProcess();
    try {
      for (let i = 0; i < 3; i++) {
        // Killed, then a command under a deadline waits for ready (a listener on the client, added and taken off).
        const [id] = await killNamed(admin, name);
        await runWithDeadline(2_000, () => client.get(key())).catch(() => {});
        await untilNamed(admin, name, [id as string]);
      }
      expect(client.listenerCount('error')).toBe(1);
    } finally {
      watch.stop();
    }
    expect(watch.seen).toEqual([]);
    expect(errors.length).toBeGreaterThan(0);
  });
});
