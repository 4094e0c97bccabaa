/**
 * The belt: the statement's limit written where the server enforces it, so a statement still stops at the
 * deadline when this process cannot send the KILL (its event loop blocked, the side connection down).
 *
 * - Text protocol (`query`): MariaDB's `SET STATEMENT max_statement_time=<s> FOR <statement>` or MySQL's
 *   `/*+ MAX_EXECUTION_TIME(<ms>) *\/` hint (which MySQL honours on SELECT only). Part of the statement itself:
 *   no session state changes, no extra round trip.
 * - Binary protocol (`execute`): the session variable, set before and restored after. Writing the limit into the
 *   text would make every budget a new prepared statement, in mysql2's cache and on the server.
 */
import type { Flavour } from './flavour.js';

/**
 * How much later than the call's own deadline the server's limit is set. The KILL should win: a statement the
 * server interrupts is not always an error (MariaDB's BENCHMARK() and MySQL's SLEEP() return a value), so a belt
 * firing first could hand the caller a made-up result before our stop answers. The belt is the backstop for a
 * process that cannot act (its event loop blocked), where these ms do not matter.
 */
export const BELT_SLACK_MS = 25;

// Whitespace and plain comments before the first keyword. Executable comments (`/*! … */`, `/*M! … */`) and
// optimizer hints (`/*+ … */`) are code, so they end the scan.
const LEADING = /^(?:\s+|\/\*(?![!+]|M!)[\s\S]*?\*\/|(?:--(?=\s)|#)[^\n]*(?:\n|$))*/;
const KEYWORD = /^(?:[a-z]+|\()/i;

// Statements MariaDB's `SET STATEMENT … FOR` is known to fit and whose running time is worth bounding. Others
// (SET, USE, LOCK TABLES, CALL, a caller's own SET STATEMENT) go unchanged: the KILL still bounds them.
const MARIADB_BOUNDED: ReadonlySet<string> = new Set([
  'select',
  'insert',
  'update',
  'delete',
  'replace',
  'with',
  'values',
  'table',
  '(',
]);

/** Whole ms, with the slack; at least 1, since 0 would mean "no limit". */
function wholeMs(ms: number): number {
  return Math.max(1, Math.ceil(ms + BELT_SLACK_MS));
}

/** MariaDB takes seconds with a fraction; ms precision is enough. */
function seconds(ms: number): string {
  return (wholeMs(ms) / 1000).toFixed(3);
}

/** @internal The statement's first keyword (lower case, or `(`) and where it starts. */
export function firstKeyword(sql: string): { word: string | undefined; at: number } {
  const at = LEADING.exec(sql)?.[0].length ?? 0;
  return { word: KEYWORD.exec(sql.slice(at))?.[0].toLowerCase(), at };
}

/**
 * @internal Marks a statement object that carries a server-side limit of its own, which the driver writes into it
 * as it sends it (the `mariadb` connector's per-statement `timeout`): no belt is added (two `SET STATEMENT … FOR`
 * would not parse), and when that limit fires, the caller gets the driver's error, not a deadline error.
 */
export const OWN_LIMIT = Symbol('@deadline/mysql.ownLimit');

/** @internal Whether `sql` carries a limit of its own ({@link OWN_LIMIT}). */
export function hasOwnLimit(sql: unknown): boolean {
  return typeof sql === 'object' && sql !== null && (sql as { [OWN_LIMIT]?: unknown })[OWN_LIMIT] === true;
}

/** @internal `sql` with the server-side limit for `ms` left (plus the slack) written into it, or unchanged when it takes none. */
export function beltSql(flavour: Flavour, sql: string, ms: number): string {
  const { word, at } = firstKeyword(sql);
  if (flavour === 'mariadb') {
    return word !== undefined && MARIADB_BOUNDED.has(word)
      ? `SET STATEMENT max_statement_time=${seconds(ms)} FOR ${sql}`
      : sql;
  }
  if (word !== 'select') return sql;
  const end = at + word.length;
  const after = sql.slice(end);
  const hint = /^\s*\/\*\+/.exec(after);
  if (hint === null) return `${sql.slice(0, end)} /*+ MAX_EXECUTION_TIME(${wholeMs(ms)}) */${after}`;
  // MySQL reads one hint comment after SELECT: ours joins the caller's, unless theirs already sets a limit.
  const close = after.indexOf('*/');
  if (/MAX_EXECUTION_TIME\s*\(/i.test(close < 0 ? after : after.slice(0, close))) return sql;
  const open = end + hint[0].length;
  return `${sql.slice(0, open)} MAX_EXECUTION_TIME(${wholeMs(ms)})${sql.slice(open)}`;
}

/** @internal The statements that set the session's limit before an `execute` and put the previous one back. */
export interface SessionBelt {
  set: string;
  restore: string;
}

/** @internal */
export function sessionBelt(flavour: Flavour, ms: number): SessionBelt {
  // The previous value is kept in a user variable, so a limit the application set on its sessions survives.
  const [variable, value] =
    flavour === 'mariadb' ? ['max_statement_time', seconds(ms)] : ['max_execution_time', String(wholeMs(ms))];
  return {
    set: `SET @deadline_saved_limit = @@session.${variable}, @@session.${variable} = ${value}`,
    restore: `SET @@session.${variable} = @deadline_saved_limit, @deadline_saved_limit = NULL`,
  };
}
