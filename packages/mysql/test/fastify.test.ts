/**
 * The client leaves: a real Fastify server with @deadline/fastify, a real client that aborts its request, and the
 * statement the handler was running gone from the server's process list.
 */
import { CancelledError } from '@deadline/core';
import fastifyDeadline from '@deadline/fastify';
import Fastify from 'fastify';
import { createPool } from 'mysql2/promise';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MARIADB, requireService } from '../../../test/support/services.ts';
import { type DeadlinePool, withDeadline } from '../src/index.ts';
import { marker, serverOptions, Watcher } from './support.ts';

const ok = await requireService(MARIADB);

describe.runIf(ok)('a client that disconnects (fastify, MariaDB)', () => {
  let watcher: Watcher;
  let db: DeadlinePool;

  beforeAll(async () => {
    watcher = await Watcher.open();
    db = withDeadline(createPool(serverOptions({ connectionLimit: 2 })));
  });

  afterAll(async () => {
    await db?.end();
    await watcher?.end();
  });

  it('cancels the running statement: it is gone from the process list, the handler sees CancelledError', async () => {
    const mark = marker();
    let failed: (error: unknown) => void = () => {};
    const handlerFailure = new Promise<unknown>((resolve) => {
      failed = resolve;
    });
    const app = Fastify();
    await app.register(fastifyDeadline, { serviceName: 'orders' });
    app.get('/slow', async () => {
      try {
        await db.query(`SELECT SLEEP(5) /* ${mark} */`);
        return { done: true };
      } catch (error) {
        failed(error);
        throw error;
      }
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const client = new AbortController();
      const response = request(`${url}/slow`, { signal: client.signal, headers: { 'x-request-deadline': '10000' } });
      const answered = response.then(
        () => 'answered',
        () => 'aborted',
      );
      await watcher.waitRunning(mark);
      const leftAt = performance.now();
      client.abort();
      expect(await answered).toBe('aborted');
      await watcher.waitGone(mark);
      expect(performance.now() - leftAt).toBeLessThan(1_000);
      const error = await handlerFailure;
      expect(error).toBeInstanceOf(CancelledError);
      expect(error).toMatchObject({ reason: 'client-disconnected' });
    } finally {
      await app.close();
    }
  });
});
