/**
 * Values any package can carry in a context, under a key of its own: what Go's `context.WithValue` and
 * OpenTelemetry's `createContextKey` do. The core knows nothing of what is stored (an idempotency sequence, a
 * tenant, a feature flag); each key says what its value becomes in work detached with `withoutCancel()`.
 */
import { InvalidArgumentError } from './errors.js';
import type { DeadlineContext } from './scope.js';
import { storage } from './storage.js';

/** What a context carries: each key's value under the key's symbol, frozen, merged over the parent's. @internal */
export type ContextValues = Readonly<Record<symbol, unknown>>;

/**
 * A value bound to its key, for {@link ContextInit.values}. Made by {@link ContextKey.with}.
 *
 * @example
 * ```ts
 * const entry: ContextValue = TENANT.with('t-42');
 * ```
 */
export interface ContextValue {
  /** @internal */
  readonly id: symbol;
  /** @internal */
  readonly value: unknown;
}

/**
 * A key under which a context carries one value. Keys are made once per module by {@link createContextKey}.
 *
 * @example
 * ```ts
 * const TENANT = createContextKey<string>('acme/tenant');
 * await runWithContext({ values: [TENANT.with('t-42')] }, () => TENANT.get()); // 't-42'
 * ```
 */
export interface ContextKey<T> {
  /** The name it was made with. */
  readonly name: string;
  /**
   * The value in `context` (default: the current context); `undefined` outside any context or when neither it
   * nor an ancestor set one.
   */
  get(context?: DeadlineContext): T | undefined;
  /** This key with `value`: an entry of {@link ContextInit.values}. */
  with(value: T): ContextValue;
}

/**
 * How a key's value passes into work detached with `withoutCancel()`.
 *
 * @example
 * ```ts
 * const options: ContextKeyOptions<Keys> = { detached: (keys) => keys.branch() };
 * ```
 */
export interface ContextKeyOptions<T> {
  /** The detached work's value, from the request's. Default: the same value. `undefined` drops it. */
  detached?: ((value: T) => T | undefined) | undefined;
}

type DetachHook = (value: unknown) => unknown;

// Keys are shared across copies of a package (and of the core) by name, as `Symbol.for` is: two copies of one
// package must read and write the same value. So are the hooks, on `globalThis`.
const kHooks = Symbol.for('@deadline/core/context-key-hooks@1');
const holder = globalThis as { [kHooks]?: Map<symbol, DetachHook> };
const hooks: Map<symbol, DetachHook> = (holder[kHooks] ??= new Map());

const PRINTABLE_NAME = /^[\x21-\x7e]{1,128}$/;

/**
 * Makes the key under which a context carries a value of type `T`. Name it after your package (`acme/tenant`):
 * every copy of a package that makes a key of the same name shares its value.
 *
 * @example
 * ```ts
 * import { createContextKey, runWithContext } from '@deadline/core';
 * const TENANT = createContextKey<string>('acme/tenant');
 * await runWithContext({ values: [TENANT.with('t-42')] }, async () => {
 *   await audit(TENANT.get()); // 't-42', here and in every call below
 * });
 * ```
 */
export function createContextKey<T>(name: string, options: ContextKeyOptions<T> = {}): ContextKey<T> {
  if (typeof name !== 'string' || !PRINTABLE_NAME.test(name)) {
    throw new InvalidArgumentError('name', '1–128 visible ASCII characters', name);
  }
  if (options.detached !== undefined && typeof options.detached !== 'function') {
    throw new InvalidArgumentError('detached', 'a function', options.detached);
  }
  const id = Symbol.for(`@deadline/core/context-key@1:${name}`);
  if (options.detached !== undefined) hooks.set(id, options.detached as DetachHook);
  return Object.freeze({
    name,
    get(context?: DeadlineContext): T | undefined {
      const scope = (context ?? storage.getStore()) as { _values?: ContextValues } | undefined;
      return scope?._values?.[id] as T | undefined;
    },
    with(value: T): ContextValue {
      return { id, value };
    },
  });
}

/** The parent's values with `own` set over them; the parent's own object when nothing is set. @internal */
export function mergeValues(
  parent: ContextValues | undefined,
  own: readonly ContextValue[] | undefined,
): ContextValues | undefined {
  if (own === undefined) return parent;
  if (!Array.isArray(own)) throw new InvalidArgumentError('values', 'an array of key.with(value)', own);
  const merged: Record<symbol, unknown> = { ...parent };
  for (const entry of own) {
    if (typeof entry?.id !== 'symbol')
      throw new InvalidArgumentError('values', 'entries made by key.with(value)', entry);
    merged[entry.id] = entry.value;
  }
  return Object.freeze(merged);
}

/** What detached work carries: each value through its key's `detached` hook. @internal */
export function detachValues(values: ContextValues | undefined): ContextValues | undefined {
  if (values === undefined) return undefined;
  const detached: Record<symbol, unknown> = {};
  for (const id of Object.getOwnPropertySymbols(values)) {
    const hook = hooks.get(id);
    const value = hook === undefined ? values[id] : hook(values[id]);
    if (value !== undefined) detached[id] = value;
  }
  return Object.freeze(detached);
}
