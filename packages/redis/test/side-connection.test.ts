/**
 * The side connection (where CLIENT UNBLOCK goes) lives as long as its client, long after the request that first
 * needed it: its socket must run its events outside that request's context, or every reply and reconnect on it
 * would run in that request's context and keep it alive. Checked on whichever AsyncLocalStorage implementation
 * runs the suite (CI runs it on each: packages/core/test/async-context.test.ts).
 */
import { currentContext, runWithDeadline } from '@deadline/core';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { REDIS, requireService } from '../../../test/support/services.ts';
import { openSideConnection } from '../src/ioredis/side-connection.ts';
import type { ConnectionLike } from '../src/ioredis/types.ts';

const available = await requireService(REDIS);

const clients: { disconnect(): void }[] = [];

describe.runIf(available)('the side connection, opened inside a request', () => {
  afterAll(() => {
    for (const client of clients) client.disconnect();
  });

  it('runs its events outside any context: its first connect and its reconnects', async () => {
    const client = new Redis(REDIS.url, { connectionName: `deadline-side-context-${process.pid}` });
    clients.push(client);
    await client.ping();
    const { side, seen } = await runWithDeadline(5_000, async () => {
      const side = openSideConnection(client as unknown as ConnectionLike);
      clients.push(side);
      // Emitted from the socket's own events (the reply to ioredis's ready check); read in the listener itself,
      // as a `then` callback would run in the context `then` was called in.
      const seen = await new Promise((resolve) => side.once('ready', () => resolve(currentContext())));
      return { side, seen };
    });
    expect(seen).toBeUndefined();
    // Killed by the server: the reconnect is timed from the socket's 'close', so it runs where that socket ran.
    const id = await side.call('CLIENT', 'ID');
    const reconnected = new Promise((resolve) => side.once('ready', () => resolve(currentContext())));
    await client.call('CLIENT', 'KILL', 'ID', String(id));
    expect(await reconnected).toBeUndefined();
  });
});
