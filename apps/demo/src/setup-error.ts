/**
 * The demo cannot run on this machine as it is: a database that will not start or does not answer. Its message
 * is one line saying why and what to do; `main.ts` prints just that (no stack: the trace is the demo's, the
 * problem is the machine's) and exits non-zero.
 */
export class SetupError extends Error {
  override name = 'SetupError';

  constructor(why: string, todo: string) {
    super(`${oneLine(why)}. ${todo}`);
  }
}

/** Whitespace (a server's multi-line message) collapsed, and no trailing full stop to double. */
function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim().replace(/\.$/, '');
}

/** What to set to use a PostgreSQL of one's own, with the shape of the URL. */
export const DATABASE_URL_HINT =
  'To use a PostgreSQL of yours instead, set DATABASE_URL: DATABASE_URL=postgres://user:password@host:5432/db npm run demo';
