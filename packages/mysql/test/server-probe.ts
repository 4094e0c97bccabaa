/**
 * The server probe (test/support/server-probe.ts) on MariaDB: `SELECT SLEEP(0.005)` on a mysql2 connection of its own.
 */
import { createConnection } from 'mysql2/promise';
import { ServerProbe } from '../../../test/support/server-probe.ts';
import { serverOptions } from './support.ts';

/** Starts probing the test server. */
export async function startServerProbe(): Promise<ServerProbe> {
  const connection = await createConnection(serverOptions());
  return ServerProbe.start({ probe: () => connection.query('SELECT SLEEP(0.005)'), close: () => connection.end() });
}

export type { ServerProbe };
