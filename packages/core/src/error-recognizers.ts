/**
 * What the guards know of errors that are not ours, registered by the package that knows them: a driver's
 * package says which of its server's errors is a statement timeout (a deadline, whoever set it) and in which
 * fields the libraries above it (ORMs) keep the error they wrap. Kept on `globalThis` under a versioned
 * `Symbol.for` key, so that two copies of the core (or of a driver's package) share one registry.
 */

/**
 * How one driver's errors are recognised.
 *
 * @example
 * ```ts
 * recognizeErrors('@deadline/pg', {
 *   wrapperFields: ['driverError'],
 *   isServerTimeout: (err) => err.code === '57014' && String(err.message).includes('statement timeout'),
 * });
 * ```
 */
export interface ErrorRecognizer {
  /** Fields, besides the standard `cause`, in which errors wrapping the driver's keep it. */
  readonly wrapperFields?: readonly string[] | undefined;
  /** Whether the error is the server stopping a statement at its own time limit. */
  readonly isServerTimeout?: ((error: Readonly<Record<PropertyKey, unknown>>) => boolean) | undefined;
}

interface Registry {
  /** By name: a package registers once, however many copies of it are loaded. */
  readonly byName: Map<string, ErrorRecognizer>;
  /** `cause` first, then each registered field once, in order of registration. */
  wrapperFields: readonly string[];
  serverTimeouts: readonly ((error: Readonly<Record<PropertyKey, unknown>>) => boolean)[];
}

const kRegistry = Symbol.for('@deadline/core/error-recognizers@1');
const holder = globalThis as { [kRegistry]?: Registry };
const registry: Registry = (holder[kRegistry] ??= { byName: new Map(), wrapperFields: ['cause'], serverTimeouts: [] });

/** The registry the guards read. @internal */
export function recognizers(): Registry {
  return registry;
}

/**
 * Teaches the guards (`isDeadlineExceededError`, `findDeadlineError`, …) a driver's errors; called once by the
 * driver's package when it is loaded. A second registration under the same name replaces the first.
 * @internal
 *
 * @example
 * ```ts
 * recognizeErrors('@deadline/mysql', { isServerTimeout: (err) => err.errno === 1969 || err.errno === 3024 });
 * ```
 */
export function recognizeErrors(name: string, recognizer: ErrorRecognizer): void {
  registry.byName.set(name, recognizer);
  const fields = new Set<string>(['cause']);
  const timeouts: ((error: Readonly<Record<PropertyKey, unknown>>) => boolean)[] = [];
  for (const each of registry.byName.values()) {
    for (const field of each.wrapperFields ?? []) fields.add(field);
    if (each.isServerTimeout !== undefined) timeouts.push(each.isServerTimeout);
  }
  registry.wrapperFields = [...fields];
  registry.serverTimeouts = timeouts;
}
