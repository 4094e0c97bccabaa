/**
 * Patching a driver's prototypes, the one way every adapter that instruments a module does it (`instrumentPg`,
 * `instrumentMysql`, `instrumentMariadb`): installed once per process under a `Symbol.for` key on the prototype
 * (whichever copy of the adapter's package asks), a later call only changing the options; undone by putting back
 * only what is still ours, so that a patch someone else made on top (an APM's) keeps working, ours inert beneath.
 */

/**
 * One driver's patch, as installed: what the patched methods read on each call.
 *
 * @example
 * ```ts
 * interface PgPatch extends DriverPatch<PgInstrumentOptions | undefined> { readonly resolved: Map<string, Resolved> }
 * ```
 */
export interface DriverPatch<O> {
  /** The options of the last call. */
  options: O;
  /** False once undone: the replaced methods then pass everything through. */
  enabled: boolean;
  /** Turns the patch off and puts the driver's methods back when nothing was patched on top. */
  readonly undo: () => void;
}

/**
 * What happens besides the replacing: made once with the patch (`fields`, the adapter's own: a cache, side
 * connections), on a later call (`reconfigured`), when it is turned off (`turnedOff`).
 *
 * @example
 * ```ts
 * const hooks: PatchHooks<MysqlPatch> = { turnedOff: (patch) => closeSideConnections(patch) };
 * ```
 */
export interface PatchHooks<P> {
  reconfigured?(patch: P): void;
  turnedOff?(patch: P): void;
}

/**
 * Installs a patch on `prototype` once, registered there under `key`; a later call sets the options, turns it back
 * on and returns the same undo. `install` replaces the driver's methods (with {@link replaceMethods}) and returns
 * the function that puts them back and says whether it did. `fields` are the adapter's own, kept on the patch.
 *
 * @example
 * ```ts
 * return patchOnce(Connection.prototype, Symbol.for('@deadline/mysql.instrumentMysql'), options,
 *   (patch) => replaceMethods(Connection.prototype, { query: bounded(patch, original) }),
 *   { backends: new Map() }, { turnedOff: closeBackends });
 * ```
 */
export function patchOnce<O, P extends DriverPatch<O>>(
  prototype: object,
  key: symbol,
  options: O,
  install: (patch: P) => () => boolean,
  fields: Omit<P, keyof DriverPatch<O>>,
  hooks: PatchHooks<P> = {},
): () => void {
  const registry = prototype as { [key: symbol]: P | undefined };
  const existing = registry[key];
  if (existing !== undefined) {
    existing.options = options;
    existing.enabled = true;
    hooks.reconfigured?.(existing);
    return existing.undo;
  }
  let restore = () => false;
  const patch = {
    ...fields,
    options,
    enabled: true,
    undo: () => {
      patch.enabled = false;
      hooks.turnedOff?.(patch);
      if (restore()) delete registry[key];
    },
  } as P;
  restore = install(patch);
  Object.defineProperty(prototype, key, { value: patch, configurable: true });
  return patch.undo;
}

/**
 * Puts `replacements` on `prototype` in place of its methods of those names; returns the function that puts the
 * originals back, which does so only while every replacement is still in place (an APM's patch made on top keeps
 * working, ours inert beneath it) and says whether it did.
 *
 * @example
 * ```ts
 * const restore = replaceMethods(pg.Client.prototype, { query: boundedQuery });
 * ```
 */
export function replaceMethods(prototype: object, replacements: Record<string, unknown>): () => boolean {
  const target = prototype as Record<string, unknown>;
  const names = Object.keys(replacements);
  const before = new Map(names.map((name) => [name, { own: Object.hasOwn(target, name), value: target[name] }]));
  for (const name of names) target[name] = replacements[name];
  return () => {
    if (names.some((name) => target[name] !== replacements[name])) return false;
    for (const [name, { own, value }] of before) {
      if (own) target[name] = value;
      else delete target[name];
    }
    return true;
  };
}
