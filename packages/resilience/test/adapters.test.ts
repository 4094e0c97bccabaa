/**
 * The breaker wired into the transport adapters (`circuitBreaker` option), on real servers: an open circuit
 * refuses the call before anything is sent; one breaker per HTTP origin; a database's syntax error or our own
 * tiny budget does not open it; a server that is down does.
 */
import { once } from 'node:events';
import { createServer, type Socket } from 'node:net';
import { runWithDeadline } from '@deadline/core';
import { createFetch } from '@deadline/http';
import { withDeadline as withMysqlDeadline } from '@deadline/mysql';
import { withDeadline as withPgDeadline } from '@deadline/pg';
import { withDeadline as withRedisDeadline } from '@deadline/redis';
import { Redis } from 'ioredis';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { MARIADB, POSTGRES, REDIS, requireService } from '../../../test/support/services.ts';
import { httpServer } from '../../http/test/servers.ts';
import { CircuitBreaker, CircuitOpenError, createBreakers } from '../src/index.ts';

/** A TCP port that accepts connections and closes them at once, counting them (a server that is down). */
async function slammingPort(): Promise<{ port: number; connections: () => number; close(): void }> {
  let count = 0;
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    count++;
    sockets.add(socket);
    socket.destroy();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    port: (server.address() as { port: number }).port,
    connections: () => count,
    close: () => {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

const small = { failureThreshold: 3, minimumCalls: 3, failureRateThreshold: 0.5, cooldownMs: 60_000 };

describe('@deadline/http with a breaker per origin', () => {
  it('a failing origin opens its own circuit: no more requests reach it; another origin is untouched', async () => {
    let failingHits = 0;
    let healthyHits = 0;
    const failing = await httpServer((_req, res) => {
      failingHits++;
      res.statusCode = 503;
      res.end();
    });
    const healthy = await httpServer((_req, res) => {
      healthyHits++;
      res.end('ok');
    });
    const breakers = createBreakers(small);
    const fetch = createFetch({ circuitBreaker: breakers });
    try {
      for (let i = 0; i < 3; i++) {
        const response = await runWithDeadline(1_000, () => fetch(`${failing.url}/stock`));
        expect(response.status).toBe(503);
        await response.arrayBuffer();
      }
      expect(breakers(new URL(failing.url).origin).state).toBe('open');
      const refused = await runWithDeadline(1_000, () => fetch(`${failing.url}/stock`)).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(CircuitOpenError);
      // Outside any context too: the breaker guards every call of this fetch.
      expect(await fetch(`${failing.url}/stock`).catch((e: unknown) => e)).toBeInstanceOf(CircuitOpenError);
      expect(failingHits).toBe(3);
      expect(await (await fetch(`${healthy.url}/`)).text()).toBe('ok');
      expect(healthyHits).toBe(1);
      expect(breakers(new URL(healthy.url).origin).state).toBe('closed');
    } finally {
      await failing.close();
      await healthy.close();
    }
  });

  it("a downstream's own 504 naming its hop does not count (it answered, our budget ran out there); a bare 504 does", async () => {
    let named = true;
    const downstream = await httpServer((_req, res) => {
      res.writeHead(504, named ? { 'x-deadline-exceeded-by': 'inventory' } : {});
      res.end();
    });
    const breakers = createBreakers(small);
    const fetch = createFetch({ circuitBreaker: breakers });
    const breaker = breakers(new URL(downstream.url).origin);
    try {
      for (let i = 0; i < 5; i++) {
        const error = await runWithDeadline(1_000, () => fetch(`${downstream.url}/stock`)).catch((e: unknown) => e);
        expect(error).toMatchObject({ whose: 'downstream:inventory' });
      }
      expect(breaker.state).toBe('closed');
      expect(breaker.stats).toMatchObject({ calls: 0, failures: 0 });
      named = false;
      for (let i = 0; i < 3; i++) {
        const response = await runWithDeadline(1_000, () => fetch(`${downstream.url}/stock`));
        expect(response.status).toBe(504);
        await response.arrayBuffer();
      }
      expect(breaker.state).toBe('open');
    } finally {
      await downstream.close();
    }
  });
});

describe.runIf(await requireService(POSTGRES))('@deadline/pg with a breaker', () => {
  const pools: pg.Pool[] = [];
  afterAll(async () => {
    await Promise.all(pools.map((pool) => pool.end().catch(() => {})));
  });

  it('a server that is down opens it; then queries fail fast without a connection attempt', async () => {
    const down = await slammingPort();
    const pool = new pg.Pool({ host: '127.0.0.1', port: down.port, user: 'postgres', database: 'test', max: 2 });
    pool.on('error', () => {});
    pools.push(pool);
    const breaker = new CircuitBreaker({ target: 'orders-db', ...small });
    const db = withPgDeadline(pool, { circuitBreaker: breaker });
    try {
      for (let i = 0; i < 3; i++) {
        await expect(runWithDeadline(2_000, () => db.query('SELECT 1'))).rejects.toThrow();
      }
      expect(breaker.state).toBe('open');
      const attempts = down.connections();
      // Set by a 0 ms timer armed before the call, the first callback the event loop runs after it: a refusal
      // that comes before it came without waiting on anything (a socket, a timer), however slow the machine.
      let aTurnWentBy = false;
      setTimeout(() => {
        aTurnWentBy = true;
      }, 0);
      const error = await runWithDeadline(2_000, () => db.query('SELECT 1')).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CircuitOpenError);
      // Fail fast: refused at once, with no connection attempt (counted below).
      expect(aTurnWentBy).toBe(false);
      expect(down.connections()).toBe(attempts);
    } finally {
      down.close();
    }
  });

  it('syntax errors and our own tiny budget are neutral: the circuit stays closed', async () => {
    const pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2 });
    pools.push(pool);
    const breaker = new CircuitBreaker({ target: 'orders-db', ...small, deadlineFloorMs: 100 });
    const db = withPgDeadline(pool, { circuitBreaker: breaker });
    for (let i = 0; i < 5; i++) {
      await expect(runWithDeadline(2_000, () => db.query('SELEC 1'))).rejects.toMatchObject({ code: '42601' });
      // 30 ms for a 5 s statement: our budget's fault, not the database's.
      await expect(runWithDeadline(30, () => db.query('SELECT pg_sleep(5)'))).rejects.toThrow();
    }
    expect(breaker.state).toBe('closed');
    expect(breaker.stats.failures).toBe(0);
    expect((await runWithDeadline(2_000, () => db.query('SELECT 1 AS one'))).rows).toEqual([{ one: 1 }]);
  });

  it('statements cut while given more than the floor count against the database', async () => {
    const pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2 });
    pools.push(pool);
    const breaker = new CircuitBreaker({ target: 'orders-db', ...small, deadlineFloorMs: 100 });
    const db = withPgDeadline(pool, { circuitBreaker: breaker });
    for (let i = 0; i < 3; i++) {
      await expect(runWithDeadline(150, () => db.query('SELECT pg_sleep(5)'))).rejects.toThrow();
    }
    expect(breaker.state).toBe('open');
  });
});

describe.runIf(await requireService(MARIADB))('@deadline/mysql with a breaker', () => {
  it('a server that is down opens it; then statements fail fast', async () => {
    const down = await slammingPort();
    const pool = mysql.createPool({
      host: '127.0.0.1',
      port: down.port,
      user: 'root',
      database: 'test',
      connectionLimit: 2,
    });
    const breaker = new CircuitBreaker({ target: 'mariadb', ...small });
    const db = withMysqlDeadline(pool, { circuitBreaker: breaker });
    try {
      for (let i = 0; i < 3; i++) {
        await expect(runWithDeadline(2_000, () => db.query('SELECT 1'))).rejects.toThrow();
      }
      expect(breaker.state).toBe('open');
      const attempts = down.connections();
      expect(await runWithDeadline(2_000, () => db.query('SELECT 1')).catch((e: unknown) => e)).toBeInstanceOf(
        CircuitOpenError,
      );
      expect(down.connections()).toBe(attempts);
    } finally {
      down.close();
      await pool.end().catch(() => {});
    }
  });

  it('a real MariaDB: SQL errors are neutral', async () => {
    const pool = mysql.createPool({ uri: MARIADB.url, connectionLimit: 2 });
    const breaker = new CircuitBreaker({ target: 'mariadb', ...small });
    const db = withMysqlDeadline(pool, { circuitBreaker: breaker });
    try {
      for (let i = 0; i < 5; i++) {
        await expect(runWithDeadline(2_000, () => db.query('SELEC 1'))).rejects.toThrow();
      }
      expect(breaker.state).toBe('closed');
      expect(breaker.stats.failures).toBe(0);
    } finally {
      await pool.end();
    }
  });
});

describe.runIf(await requireService(REDIS))('@deadline/redis with a breaker', () => {
  it('an unreachable Redis opens it; commands then fail fast; blocking commands are not counted', async () => {
    const down = await slammingPort();
    const client = new Redis({ host: '127.0.0.1', port: down.port, maxRetriesPerRequest: 0, lazyConnect: true });
    client.on('error', () => {});
    const breaker = new CircuitBreaker({ target: 'sessions', ...small });
    const redis = withRedisDeadline(client, { circuitBreaker: breaker });
    try {
      for (let i = 0; i < 3; i++) {
        await expect(runWithDeadline(300, () => redis.get('k'))).rejects.toThrow();
      }
      expect(breaker.state).toBe('open');
      expect(await runWithDeadline(300, () => redis.get('k')).catch((e: unknown) => e)).toBeInstanceOf(
        CircuitOpenError,
      );
    } finally {
      client.disconnect();
      down.close();
    }
    const real = new Redis(REDIS.url, { maxRetriesPerRequest: 1 });
    const guarded = new CircuitBreaker({ target: 'queue', ...small });
    const queue = withRedisDeadline(real, { circuitBreaker: guarded });
    try {
      // A blocking pop that waits out its whole budget is Redis doing its job.
      for (let i = 0; i < 4; i++) {
        await runWithDeadline(150, () => queue.blpop(`deadline:breaker:${process.pid}`, 0)).catch(() => {});
      }
      expect(guarded.state).toBe('closed');
      expect(guarded.stats.calls).toBe(0);
    } finally {
      real.disconnect();
    }
  });
});
