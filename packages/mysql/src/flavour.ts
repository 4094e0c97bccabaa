/**
 * MariaDB and MySQL bound a statement on the server in different ways, so the server's flavour is read once per
 * wrapped pool: from the handshake of our side connection (its server version string), else `SELECT VERSION()`.
 */

/** @internal */
export type Flavour = 'mariadb' | 'mysql';

/** @internal MariaDB announces itself in its version string (`5.5.5-10.11.6-MariaDB-…`); anything else is MySQL. */
export function flavourOf(serverVersion: string): Flavour {
  return /mariadb/i.test(serverVersion) ? 'mariadb' : 'mysql';
}
