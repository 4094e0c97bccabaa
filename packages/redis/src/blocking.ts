/**
 * Redis's blocking commands: where each keeps its timeout and in which unit, and how to put back what it
 * popped. A blocking command given a server-side timeout within the budget returns by itself; one released
 * early (the request died) may have popped an element in the race, which must go back, not be lost.
 */

type Args = (string | number | Buffer)[];

/** Where a command's timeout argument is. @internal */
interface BlockingSpec {
  /** The index of the timeout argument, or a function finding it (`XREAD … BLOCK ms`). */
  at: number | ((args: Args) => number);
  unit: 's' | 'ms';
  /** Puts back what the command returned (list and sorted-set pops); absent when nothing is removed. */
  pushBack?: (args: Args, reply: unknown) => [string, ...(string | number | Buffer)[]][];
  /** Its reply at the timeout is a count, not "nothing" (`WAIT`). */
  countsAtTimeout?: true;
}

const last = (args: Args) => args.length - 1;
/**
 * XREAD/XREADGROUP: `BLOCK ms` is one of the options before `STREAMS` (after XREADGROUP's `GROUP group
 * consumer`); keys, ids and names may be spelled anything, so the options are walked, not searched.
 */
const blockOption = (first: number) => (args: Args) => {
  for (let i = first; i < args.length; i++) {
    const option = String(args[i]).toUpperCase();
    if (option === 'BLOCK') return i + 1;
    if (option === 'COUNT' || option === 'CLAIM') i++;
    else if (option !== 'NOACK') return -1; // STREAMS, or something this table does not know
  }
  return -1;
};

/** BLPOP/BRPOP reply: [key, element]. Back to the end it was taken from. */
const listPop =
  (push: 'lpush' | 'rpush') =>
  (_args: Args, reply: unknown): [string, ...(string | Buffer)[]][] => {
    if (!Array.isArray(reply) || reply.length !== 2) return [];
    return [[push, reply[0] as string, reply[1] as string]];
  };

/** BZPOPMIN/MAX reply: [key, member, score]. */
const zsetPop = (_args: Args, reply: unknown): [string, ...(string | Buffer)[]][] => {
  if (!Array.isArray(reply) || reply.length !== 3) return [];
  return [['zadd', reply[0] as string, reply[2] as string, reply[1] as string]];
};

/** BLMPOP reply: [key, [elements…]], taken from LEFT or RIGHT (the argument after the keys). */
const listMultiPop = (args: Args, reply: unknown): [string, ...(string | Buffer)[]][] => {
  if (!Array.isArray(reply) || reply.length !== 2 || !Array.isArray(reply[1])) return [];
  const numkeys = Number(args[1]);
  const fromLeft = String(args[2 + numkeys]).toUpperCase() === 'LEFT';
  // The reply lists the elements in the order they were popped, from the end named: pushing them back onto
  // that end last-popped first restores the list (LEFT [a, b] → LPUSH b a; RIGHT [c, b] → RPUSH b c).
  const elements = [...(reply[1] as (string | Buffer)[])].reverse();
  return [[fromLeft ? 'lpush' : 'rpush', reply[0] as string, ...elements]];
};

/** BZMPOP reply: [key, [[member, score]…]]. */
const zsetMultiPop = (_args: Args, reply: unknown): [string, ...(string | Buffer)[]][] => {
  if (!Array.isArray(reply) || reply.length !== 2 || !Array.isArray(reply[1])) return [];
  const pairs = reply[1] as [string, string][];
  return pairs.length === 0
    ? []
    : [['zadd', reply[0] as string, ...pairs.flatMap(([member, score]) => [score, member])]];
};

/** @internal */
export const BLOCKING: Readonly<Record<string, BlockingSpec>> = {
  blpop: { at: last, unit: 's', pushBack: listPop('lpush') },
  brpop: { at: last, unit: 's', pushBack: listPop('rpush') },
  bzpopmin: { at: last, unit: 's', pushBack: zsetPop },
  bzpopmax: { at: last, unit: 's', pushBack: zsetPop },
  blmpop: { at: 0, unit: 's', pushBack: listMultiPop },
  bzmpop: { at: 0, unit: 's', pushBack: zsetMultiPop },
  // The element moves to the destination list: moved, not lost.
  blmove: { at: last, unit: 's' },
  brpoplpush: { at: last, unit: 's' },
  // Stream reads remove nothing (XREADGROUP's entries wait in the pending list).
  xread: { at: blockOption(0), unit: 'ms' },
  xreadgroup: { at: blockOption(3), unit: 'ms' },
  // Its reply at the timeout is the number of replicas reached so far: only the server knows it.
  wait: { at: 1, unit: 'ms', countsAtTimeout: true },
};

/** Where this call of `command` keeps its timeout, or -1 when it does not block (XREAD without `BLOCK`). */
function timeoutIndex(command: string, args: Args): number {
  const spec = BLOCKING[command];
  if (spec === undefined) return -1;
  const at = typeof spec.at === 'number' ? spec.at : spec.at(args);
  return at >= 0 && at < args.length ? at : -1;
}

/** Whether this call of `command` blocks (XREAD only with `BLOCK`). @internal */
export function isBlocking(command: string, args: Args): boolean {
  return timeoutIndex(command, args) !== -1;
}

/**
 * The call's own timeout in ms: 0 for "forever" (also for a value the server would refuse, which the clamp
 * replaces); `undefined` when the call does not block.
 * @internal
 */
export function ownTimeoutMs(command: string, args: Args): number | undefined {
  const at = timeoutIndex(command, args);
  if (at === -1) return undefined;
  const given = Number(args[at]);
  if (!Number.isFinite(given) || given < 0) return 0;
  return BLOCKING[command]?.unit === 's' ? given * 1000 : given;
}

/**
 * Whether the command's reply at its own timeout is "nothing" (`null`), so that releasing it here at that
 * timeout, and answering `null`, is exactly what the server would have answered. Not `WAIT`: its reply is a
 * count that only the server knows.
 * @internal
 */
export function nullAtTimeout(command: string): boolean {
  return BLOCKING[command]?.countsAtTimeout !== true;
}

/**
 * Whether `reply` is the command's answer at its timeout: "nothing" (`null`), or for `WAIT` fewer replicas than it
 * asked for.
 * @internal
 */
export function isTimeoutReply(command: string, args: Args, reply: unknown): boolean {
  return BLOCKING[command]?.countsAtTimeout === true ? Number(reply) < Number(args[0]) : reply === null;
}

/**
 * The arguments with the server-side timeout set to `ms`, rounded up to whole ms (the server never answers
 * before `ms`), at least 1 (0 would mean "forever").
 * @internal
 */
export function withTimeoutMs(command: string, args: Args, ms: number): Args {
  const at = timeoutIndex(command, args);
  if (at === -1) return args;
  const whole = Math.max(1, Math.ceil(ms));
  const changed = [...args];
  changed[at] = BLOCKING[command]?.unit === 's' ? (whole / 1000).toFixed(3) : String(whole);
  return changed;
}

/**
 * The command's arguments with its server-side timeout no longer than `budgetMs` (0 — "forever" — becomes the
 * budget). Returns them unchanged when the command does not block or names no timeout.
 * @internal
 */
export function clampTimeout(command: string, args: Args, budgetMs: number): Args {
  const own = ownTimeoutMs(command, args);
  if (own === undefined) return args;
  // Rounded down: never beyond the budget.
  return withTimeoutMs(command, args, Math.floor(own === 0 ? budgetMs : Math.min(own, budgetMs)));
}

/** Commands that put back what a released blocking command popped. @internal */
export function pushBackCommands(command: string, args: Args, reply: unknown) {
  return BLOCKING[command]?.pushBack?.(args, reply) ?? [];
}
