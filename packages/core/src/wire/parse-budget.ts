/**
 * From request headers to one budget: every dialect the receiver accepts is read, invalid values are set
 * aside with a reason, and the smallest valid budget wins, clamped to the receiver's maximum.
 */
import { MAX_TIMER_DELAY_MS } from '../clock.js';
import { InvalidArgumentError } from '../errors.js';
import { checkNumber } from '../validate.js';
import { parseGrpcTimeoutValue } from './grpc-timeout.js';
import {
  ALL_DIALECTS,
  type BudgetHeader,
  CONNECT_TIMEOUT_HEADER,
  type DeadlineDialect,
  ENVOY_EXPECTED_TIMEOUT_HEADER,
  GRPC_TIMEOUT_HEADER,
  REQUEST_DEADLINE_AT_HEADER,
  REQUEST_DEADLINE_HEADER,
} from './header-names.js';
import { digitsValue, isDigits, printable, type Refusal, singleValue } from './header-value.js';
import { type HeaderSource, readHeader } from './headers.js';
import { MAX_MS_DIGITS, parseMilliseconds, parseTimeoutMilliseconds } from './milliseconds.js';

/**
 * A header that was present but not used, and why.
 *
 * @example
 * ```ts
 * for (const { header, value, reason } of parseBudget(req.headers).ignored) log.debug({ header, value }, reason);
 * ```
 */
export interface IgnoredHeader {
  header: BudgetHeader;
  /** The raw value, cut to 64 characters. */
  value: string;
  reason: string;
}

/**
 * The budget a request's headers ask for.
 *
 * @example
 * ```ts
 * const { budgetMs, header, requestedMs } = parseBudget(req.headers);
 * const deadline = Deadline.fromNow(budgetMs ?? routeDefaultMs);
 * ```
 */
export interface ParsedBudget {
  /**
   * The smallest valid budget in ms (may be fractional), clamped to `maxMs`; `undefined` if none was valid. `0` when
   * the caller has nothing left: a `grpc-timeout` or `Connect-Timeout-Ms` of zero, an absolute time already past.
   */
  budgetMs: number | undefined;
  /** The header the budget came from. */
  header: BudgetHeader | undefined;
  /** That header's raw value. */
  value: string | undefined;
  /** The budget asked for, when it was more than `maxMs` and got clamped. */
  requestedMs: number | undefined;
  /** Headers that were present but refused (invalid, or from a dialect not accepted here). */
  ignored: readonly IgnoredHeader[];
}

/**
 * Options of {@link createBudgetParser}.
 *
 * @example
 * ```ts
 * const options: BudgetParserOptions = { maxMs: 10_000, dialects: ['deadline', 'grpc'], absolute: { skewMs: 50 } };
 * ```
 */
export interface BudgetParserOptions {
  /** Dialects to accept. Default: all — `deadline`, `grpc`, `connect`, `envoy`. */
  dialects?: readonly DeadlineDialect[] | undefined;
  /** Upper clamp for any budget, in ms. Default and ceiling 2^31−1 (what a timer can hold). */
  maxMs?: number | undefined;
  /**
   * Accept `X-Request-Deadline-At` (epoch ms). Off by default: an absolute time is only as good as the two
   * clocks agree. `skewMs` is taken off the budget so that clock skew up to it cannot make us outlive the caller.
   */
  absolute?: { skewMs: number } | false | undefined;
  /** Wall clock for the absolute form (epoch ms). Default `Date.now`; for tests. */
  now?: (() => number) | undefined;
}

/**
 * Reads the budget from request headers; made once by {@link createBudgetParser}.
 *
 * @example
 * ```ts
 * const parse: BudgetParser = createBudgetParser({ maxMs: 5_000 });
 * const { budgetMs } = parse(req.headers);
 * ```
 */
export type BudgetParser = (headers: HeaderSource) => ParsedBudget;

const NO_IGNORED: readonly IgnoredHeader[] = Object.freeze([]);
const NO_BUDGET: ParsedBudget = Object.freeze({
  budgetMs: undefined,
  header: undefined,
  value: undefined,
  requestedMs: undefined,
  ignored: NO_IGNORED,
});

const MAX_EPOCH_DIGITS = 16;

type PlainHeaders = Readonly<Record<string, unknown>>;

interface Reader {
  header: BudgetHeader;
  /**
   * The header from a plain headers object (node's `req.headers`), by its literal name. Each is its own load
   * site, so each stays a fast monomorphic load: one shared `headers[name]` site sees every name and turns
   * megamorphic, a slow lookup per header per request.
   */
  read(headers: PlainHeaders): unknown;
  parse(raw: unknown): number | Refusal;
}

const READERS: Readonly<Record<DeadlineDialect, Reader>> = {
  deadline: { header: REQUEST_DEADLINE_HEADER, read: (h) => h['x-request-deadline'], parse: parseMilliseconds },
  grpc: { header: GRPC_TIMEOUT_HEADER, read: (h) => h['grpc-timeout'], parse: parseGrpcTimeoutValue },
  connect: { header: CONNECT_TIMEOUT_HEADER, read: (h) => h['connect-timeout-ms'], parse: parseTimeoutMilliseconds },
  envoy: {
    header: ENVOY_EXPECTED_TIMEOUT_HEADER,
    read: (h) => h['x-envoy-expected-rq-timeout-ms'],
    parse: parseMilliseconds,
  },
};

const readDeadlineAt = (h: PlainHeaders): unknown => h['x-request-deadline-at'];

/** A header understood but not accepted by this receiver, and why. */
interface Refused extends Pick<Reader, 'header' | 'read'> {
  reason: string;
}

/** The header `reader` reads, from node's plain headers or from anything with `get()` (fetch's Headers). */
function readFrom(headers: HeaderSource, plain: boolean, reader: Pick<Reader, 'header' | 'read'>): unknown {
  return plain ? reader.read(headers as PlainHeaders) : readHeader(headers, reader.header);
}

function absoluteReader(skewMs: number, now: () => number): Reader {
  return {
    header: REQUEST_DEADLINE_AT_HEADER,
    read: readDeadlineAt,
    parse(raw) {
      const text = singleValue(raw);
      if (typeof text !== 'string') return text;
      if (!isDigits(text, MAX_EPOCH_DIGITS)) return { refusal: 'not an epoch time in whole milliseconds' };
      // Already past (or within the skew allowance of it) is a real answer: the caller has nothing left.
      const left = Number(text) - now() - skewMs;
      return Math.max(left, 0);
    },
  };
}

function checkDialects(value: unknown): readonly DeadlineDialect[] {
  if (value === undefined) return ALL_DIALECTS;
  if (!Array.isArray(value) || value.some((d) => !Object.hasOwn(READERS, d))) {
    throw new InvalidArgumentError('dialects', `an array of ${ALL_DIALECTS.map((d) => `'${d}'`).join(', ')}`, value);
  }
  return Object.freeze([...new Set(value as DeadlineDialect[])]);
}

/**
 * Creates a parser that reads the budget from request headers. Options are checked here, once.
 * Never throws on header content: invalid values are reported in `ignored`, with a reason.
 *
 * @example
 * ```ts
 * import { createBudgetParser } from '@deadline/core/wire';
 * const parseBudget = createBudgetParser({ maxMs: 10_000, dialects: ['deadline', 'grpc'] });
 * const { budgetMs, header, ignored } = parseBudget(req.headers);
 * ```
 */
export function createBudgetParser(options: BudgetParserOptions = {}): BudgetParser {
  const dialects = checkDialects(options.dialects);
  const maxMs = checkNumber('maxMs', options.maxMs, { min: 1, max: MAX_TIMER_DELAY_MS }) ?? MAX_TIMER_DELAY_MS;
  const now = options.now ?? Date.now;
  const readers: Reader[] = dialects.map((d) => READERS[d]);
  if (options.absolute !== undefined && options.absolute !== false) {
    const skewMs = checkNumber('absolute.skewMs', options.absolute?.skewMs, { optional: false, max: 60_000 }) as number;
    readers.push(absoluteReader(skewMs, now));
  }
  // Headers we understand but this receiver does not accept: reported, so a misconfiguration is visible.
  const refused: Refused[] = ALL_DIALECTS.filter((d) => !dialects.includes(d)).map((d) => ({
    header: READERS[d].header,
    read: READERS[d].read,
    reason: 'dialect not accepted here',
  }));
  if (readers.length === dialects.length) {
    refused.push({
      header: REQUEST_DEADLINE_AT_HEADER,
      read: readDeadlineAt,
      reason: 'absolute form not accepted here (see the absolute option)',
    });
  }

  const acceptsOurs = dialects.includes('deadline');
  const clamped = (ms: number, header: BudgetHeader, raw: unknown): ParsedBudget => ({
    budgetMs: Math.min(ms, maxMs),
    header,
    value: printable(raw),
    requestedMs: ms > maxMs ? ms : undefined,
    ignored: NO_IGNORED,
  });

  return function parseBudget(headers: HeaderSource): ParsedBudget {
    // The common cases first, from node's plain headers: no budget header at all (the edge), or only ours (a hop
    // of ours calling the next). Literal loads, no call per dialect: this runs for every request a server gets.
    if (typeof (headers as { get?: unknown }).get !== 'function') {
      const ours = ourBudgetAlone(headers as PlainHeaders);
      if (ours === 0) return NO_BUDGET;
      if (ours > 0 && acceptsOurs) {
        return clamped(ours, REQUEST_DEADLINE_HEADER, (headers as PlainHeaders)['x-request-deadline']);
      }
    }
    let best: number | undefined;
    let bestHeader: BudgetHeader | undefined;
    let bestValue: unknown;
    let ignored: IgnoredHeader[] | undefined;
    const plain = typeof (headers as { get?: unknown }).get !== 'function';
    for (const reader of readers) {
      const raw = readFrom(headers, plain, reader);
      if (raw === undefined) continue;
      const ms = reader.parse(raw);
      if (typeof ms !== 'number') {
        (ignored ??= []).push({ header: reader.header, value: printable(raw), reason: ms.refusal });
      } else if (best === undefined || ms < best) {
        best = ms;
        bestHeader = reader.header;
        bestValue = raw;
      }
    }
    for (const item of refused) {
      const raw = readFrom(headers, plain, item);
      if (raw !== undefined) (ignored ??= []).push({ header: item.header, value: printable(raw), reason: item.reason });
    }

    if (best === undefined) {
      return ignored === undefined ? NO_BUDGET : { ...NO_BUDGET, ignored };
    }
    const parsed = clamped(best, bestHeader as BudgetHeader, bestValue);
    if (ignored !== undefined) parsed.ignored = ignored;
    return parsed;
  };
}

/** Whether no budget header but ours (`X-Request-Deadline`) is present: every other name any reader knows is absent. */
function onlyOursIfAny(headers: PlainHeaders): boolean {
  return (
    headers['grpc-timeout'] === undefined &&
    headers['connect-timeout-ms'] === undefined &&
    headers['x-envoy-expected-rq-timeout-ms'] === undefined &&
    headers['x-request-deadline-at'] === undefined
  );
}

/**
 * @internal The budget of the request nearly every server gets, read without the parser's objects: `0` when node's
 * plain headers carry no budget header at all; the milliseconds of `X-Request-Deadline` when it is the only one and
 * holds bare digits (to be taken only by a receiver that accepts our header); `-1` for anything else, which the
 * parser reads (and reports). Small enough for V8 to inline into a server's request hook, which the parser is not;
 * the parser starts with it too.
 */
export function ourBudgetAlone(headers: PlainHeaders): number {
  if (!onlyOursIfAny(headers)) return -1;
  const ours = headers['x-request-deadline'];
  if (ours === undefined) return 0;
  // `0` is not a budget: the parser says why.
  const ms = typeof ours === 'string' ? digitsValue(ours, MAX_MS_DIGITS) : -1;
  return ms > 0 ? ms : -1;
}

let defaultParser: BudgetParser | undefined;

/**
 * Reads the budget from request headers with default options (every relative dialect, clamp 2^31−1 ms).
 * For options, make a parser once with {@link createBudgetParser}.
 *
 * @example
 * ```ts
 * import { parseBudget } from '@deadline/core/wire';
 * parseBudget({ 'x-request-deadline': '800', 'grpc-timeout': '500m' }).budgetMs; // 500
 * ```
 */
export function parseBudget(headers: HeaderSource): ParsedBudget {
  defaultParser ??= createBudgetParser();
  return defaultParser(headers);
}
