/**
 * A single `pg.Client` seen as a pool of one. A CancelRequest stops whatever the backend runs when it arrives,
 * so two requests sharing one client must take turns: a cancel meant for one would otherwise stop the other's
 * statement. Each unit of work holds the client until its statements settled and its cancel was delivered.
 */
import { CONNECTION, holdConnection, queryHeld } from './held-connection.js';
import { CANNOT_DESTROY } from './session.js';
import type { PgPoolClientLike, PgPoolLike } from './with-deadline.js';

/**
 * The parts of a `pg.Client` used (a connected `pg.Client` fits; pg is not imported).
 *
 * @example
 * ```ts
 * const client: PgClient = new pg.Client({ connectionString: process.env.DATABASE_URL });
 * await client.connect();
 * const db = withDeadline(client);
 * ```
 */
export interface PgClient extends Omit<PgPoolClientLike, 'release'> {
  database?: string | undefined;
  end(): Promise<void>;
}

/** Whether `value` is a `pg.Client` (it has a backend) rather than a `pg.Pool` (it counts connections). */
export function isClient(value: object): value is PgClient {
  return !('totalCount' in value) && 'processID' in value;
}

/** @internal */
export function clientAsPool(client: PgClient): PgPoolLike {
  let turn: Promise<void> = Promise.resolve();
  const pool: PgPoolLike = {
    options: { database: client.database },
    connect() {
      let done: () => void = () => {};
      const previous = turn;
      turn = new Promise((resolve) => {
        done = resolve;
      });
      return previous.then(() => {
        let released = false;
        // Methods run on the client itself (pg keeps its query state on `this`); the backend's identity is
        // read live, for the cancel.
        const lease: PgPoolClientLike = {
          query: (text, values) => client.query(text, values),
          get processID() {
            return client.processID;
          },
          get secretKey() {
            return client.secretKey;
          },
          get connectionParameters() {
            return client.connectionParameters;
          },
          get connection() {
            return client.connection;
          },
          // The connection is the client's: its 'error' listener goes there, and its failure outlives the turn.
          [CONNECTION]: client,
          [CANNOT_DESTROY]: true,
          // The user's client is theirs to close: "destroying" it here only ends this turn.
          release: () => {
            if (released) return;
            released = true;
            done();
          },
        };
        return lease;
      });
    },
    // Outside a deadline too, a statement takes its turn: a cancel meant for a bounded one must not stop it.
    async query(text, values) {
      const lease = await pool.connect();
      const letGo = holdConnection(lease);
      try {
        return await queryHeld(lease, text, values);
      } finally {
        lease.release();
        letGo();
      }
    },
    end: () => client.end(),
  };
  return pool;
}
