/**
 * What the MariaDB tests share: connection options from the test service's URL, a watcher that reads the server's
 * process list from a plain connection of its own, and users whose connections can be counted apart from other
 * test files running at the same time.
 */
import { randomUUID } from 'node:crypto';
import { type Connection, createConnection, type PoolOptions, type RowDataPacket } from 'mysql2/promise';
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

/** A comment unique to one statement, to find it in the process list: `/* mark-… *\/`. */
export function marker(): string {
  return `mark-${randomUUID()}`;
}

/** Reads the process list from its own connection (never through the code under test). */
export class Watcher {
  readonly #connection: Connection;

  private constructor(connection: Connection) {
    this.#connection = connection;
  }

  static async open(): Promise<Watcher> {
    return new Watcher(await createConnection(serverOptions()));
  }

  /** How many statements the server is running whose text contains `mark`. */
  async running(mark: string): Promise<number> {
    // The marker is split in the watcher's own SQL, so the watcher's statement never matches itself.
    const half = Math.floor(mark.length / 2);
    const [rows] = await this.#connection.query<RowDataPacket[]>(
      `SELECT COUNT(*) AS n FROM information_schema.processlist WHERE INFO LIKE CONCAT('%', '${mark.slice(0, half)}', '${mark.slice(half)}', '%')`,
    );
    return Number(rows[0]?.n);
  }

  /** Polls until a statement containing `mark` runs (bounded by the test's timeout). */
  async waitRunning(mark: string): Promise<void> {
    while ((await this.running(mark)) === 0) {}
  }

  /** Polls until no statement containing `mark` runs; resolves with the time it was first seen gone. */
  async waitGone(mark: string): Promise<number> {
    while ((await this.running(mark)) > 0) {}
    return performance.now();
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

  /** Polls until `user` has exactly `count` connections open (the server notices a close asynchronously). */
  async waitConnections(user: string, count: number): Promise<number[]> {
    for (;;) {
      const ids = await this.connectionsOf(user);
      if (ids.length === count) return ids;
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
