/**
 * What the MariaDB tests share: connection options from the test service's URL, a watcher that reads the server's
 * process list from a plain connection of its own, and users whose connections can be counted apart from other
 * test files running at the same time.
 */
import { randomUUID } from 'node:crypto';
import { runWithDeadline } from '@deadline/core';
import {
  type Connection,
  type ConnectionOptions,
  createConnection,
  type Pool,
  type PoolOptions,
  type RowDataPacket,
} from 'mysql2/promise';
import { MARIADB } from '../../../test/support/services.ts';

/** Connection options of the test server (`MYSQL_URL`, default `mysql://root@127.0.0.1:3306/test`). */
export function serverOptions(overrides: PoolOptions = {}): PoolOptions {
  const url = new URL(MARIADB.url);
  return {
    host: url.hostname,
    port: Number(url.port || 3306),
    user: decodeURIComponent(url.username || 'root'),
    password: decodeURIComponent(url.password),
    database: url.pathname.slice(1) || 'test',
    ...overrides,
  };
}

/** The test server's address and login, each one set: what ORMs that take them one by one are given. */
export function serverParts(): { host: string; port: number; user: string; password: string; database: string } {
  const { host, port, user, password, database } = serverOptions();
  return {
    host: host ?? '127.0.0.1',
    port: port ?? 3306,
    user: user ?? 'root',
    password: password ?? '',
    database: database ?? 'test',
  };
}

/** The parsed connection config mysql2 keeps for a pool's connections (what the side connection is opened with). */
export function connectionConfigOf(pool: Pool): object {
  return (pool.pool as unknown as { config: { connectionConfig: object } }).config.connectionConfig;
}

/** How a call under a deadline settled: its error (none if it succeeded), when, and when its deadline was. */
export interface Settled {
  error: unknown;
  at: number;
  deadlineAt: number;
}

/** Runs `fn` under a deadline of `ms`; resolves with how it settled, never rejects. */
export async function underDeadline(ms: number, fn: () => Promise<unknown>): Promise<Settled> {
  const deadlineAt = performance.now() + ms;
  try {
    await runWithDeadline(ms, fn);
    return { error: undefined, at: performance.now(), deadlineAt };
  } catch (error) {
    return { error, at: performance.now(), deadlineAt };
  }
}

/** A comment unique to one statement, to find it in the process list: `/* mark-… *\/`. */
export function marker(): string {
  return `mark-${randomUUID()}`;
}

/** The process list's condition for statements whose text contains `mark`. */
function containing(mark: string): string {
  // The marker is split in the watcher's own SQL, so the watcher's statement never matches itself.
  const half = Math.floor(mark.length / 2);
  return `INFO LIKE CONCAT('%', '${mark.slice(0, half)}', '${mark.slice(half)}', '%')`;
}

/** Reads the process list from its own connection (never through the code under test). */
export class Watcher {
  readonly #connection: Connection;

  private constructor(connection: Connection) {
    this.#connection = connection;
  }

  /** A watcher of the test server, or of the server `options` name. */
  static async open(options: ConnectionOptions = serverOptions()): Promise<Watcher> {
    return new Watcher(await createConnection(options));
  }

  /** How many statements the server is running whose text contains `mark`. */
  async running(mark: string): Promise<number> {
    const [rows] = await this.#connection.query<RowDataPacket[]>(
      `SELECT COUNT(*) AS n FROM information_schema.processlist WHERE ${containing(mark)}`,
    );
    return Number(rows[0]?.n);
  }

  /** The id of the connection running the statement whose text contains `mark`, if one does. */
  async threadRunning(mark: string): Promise<number | undefined> {
    const [rows] = await this.#connection.query<RowDataPacket[]>(
      `SELECT ID AS id FROM information_schema.processlist WHERE ${containing(mark)}`,
    );
    return rows[0] === undefined ? undefined : Number(rows[0].id);
  }

  /** Polls until a statement containing `mark` runs; throws after `limitMs`. */
  async waitRunning(mark: string, limitMs = 10_000): Promise<void> {
    const until = performance.now() + limitMs;
    while ((await this.running(mark)) === 0) {
      if (performance.now() > until) throw new Error(`${mark} never started`);
    }
  }

  /**
   * Polls until no statement containing `mark` runs; resolves with when it ended (performance.now()). That is when
   * the server says, when the connection that ran it is idle since: `TIME_MS` of its `Sleep`, read on this
   * process's clock (the middle of the read's round trip). Else, or if that were later, when the poll first saw
   * it gone, a round trip or two after.
   */
  async waitGone(mark: string): Promise<number> {
    return (await this.waitGoneSpan(mark)).goneAt;
  }

  /**
   * {@link waitGone}, and when the last poll that still saw the statement running was sent: it ran at least until
   * then. A server that stalls holds that poll's answer up, and `goneAt` with it; this one it does not move.
   */
  async waitGoneSpan(mark: string): Promise<{ seenRunningAt: number | undefined; goneAt: number }> {
    let thread: number | undefined;
    let seenRunningAt: number | undefined;
    for (;;) {
      const sent = performance.now();
      const running = await this.threadRunning(mark);
      if (running === undefined) break;
      thread = running;
      seenRunningAt = sent;
    }
    const seen = performance.now();
    if (thread === undefined) return { seenRunningAt, goneAt: seen };
    const asked = performance.now();
    const [rows] = await this.#connection.query<RowDataPacket[]>(
      'SELECT COMMAND AS command, TIME_MS AS ms FROM information_schema.processlist WHERE ID = ?',
      [thread],
    );
    const answered = performance.now();
    // Gone, or already running something else: when the poll saw it gone.
    if (rows[0]?.command !== 'Sleep') return { seenRunningAt, goneAt: seen };
    return { seenRunningAt, goneAt: Math.min((asked + answered) / 2 - Number(rows[0].ms), seen) };
  }

  /** The ids of the connections `user` has open. */
  async connectionsOf(user: string): Promise<number[]> {
    const [rows] = await this.#connection.query<RowDataPacket[]>(
      'SELECT ID AS id FROM information_schema.processlist WHERE USER = ? ORDER BY ID',
      [user],
    );
    return rows.map((row) => Number(row.id));
  }

  /** How many statements `user`'s connections are running. */
  async statementsOf(user: string): Promise<number> {
    const [rows] = await this.#connection.query<RowDataPacket[]>(
      "SELECT COUNT(*) AS n FROM information_schema.processlist WHERE USER = ? AND COMMAND <> 'Sleep'",
      [user],
    );
    return Number(rows[0]?.n);
  }

  /**
   * What `user`'s connections are doing, except idling: a statement running (`Query`, `Execute`), a connection
   * being set up (`Connect`) or torn down (`Killed`).
   */
  async activityOf(user: string): Promise<{ id: number; command: string; state: string; info: string | null }[]> {
    const [rows] = await this.#connection.query<RowDataPacket[]>(
      "SELECT ID AS id, COMMAND AS command, STATE AS state, INFO AS info FROM information_schema.processlist WHERE USER = ? AND COMMAND <> 'Sleep'",
      [user],
    );
    return rows as { id: number; command: string; state: string; info: string | null }[];
  }

  /** Polls until `user` has exactly `count` connections open (the server notices a close asynchronously). */
  async waitConnections(user: string, count: number): Promise<number[]> {
    for (;;) {
      const ids = await this.connectionsOf(user);
      if (ids.length === count) return ids;
    }
  }

  /** `KILL CONNECTION` on each of `ids`, as a restart, a failover or `wait_timeout` would drop them. */
  async kill(ids: Iterable<number>): Promise<void> {
    for (const id of ids) {
      await this.#connection.query(`KILL CONNECTION ${Number(id)}`).catch((error: unknown) => {
        // Gone already (closed by its client meanwhile): nothing to kill.
        if ((error as { errno?: unknown }).errno !== 1094) throw error;
      });
    }
  }

  query<T extends RowDataPacket[]>(sql: string, values?: unknown[]): Promise<[T, unknown]> {
    return this.#connection.query<T>(sql, values);
  }

  end(): Promise<void> {
    return this.#connection.end();
  }
}

/**
 * A user of its own for one test file, so its connections can be counted while other files run. Granted what
 * the tests need on the test database, and nothing else: KILL QUERY on its own connections needs no privilege.
 */
export async function testUser(watcher: Watcher, name: string): Promise<PoolOptions> {
  const database = serverOptions().database as string;
  await watcher.query(`CREATE USER IF NOT EXISTS '${name}'@'%'`);
  await watcher.query(`GRANT ALL PRIVILEGES ON \`${database}\`.* TO '${name}'@'%'`);
  return serverOptions({ user: name, password: '' });
}

/** Nearest-rank percentile of `values`. */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index] as number;
}
