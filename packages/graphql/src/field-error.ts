/**
 * The error a field gets when the request's time ran out before it resolved, or was too short to start it: a
 * `GraphQLError` located at the field, with `extensions.code: "DEADLINE_EXCEEDED"` and the hop whose deadline fired.
 * Its message names no internal target (a table, a downstream's address), and it carries no stack: a deadline is an
 * expected outcome, and the servers print a resolver error's stack into their logs and, outside production, into
 * the answer.
 */
import { GraphQLError, type GraphQLResolveInfo } from 'graphql';

/**
 * `extensions.code` of a field cut, or not started, for lack of time.
 *
 * @example
 * ```ts
 * const cut = result.errors?.filter((error) => error.extensions?.code === DEADLINE_EXCEEDED) ?? [];
 * ```
 */
export const DEADLINE_EXCEEDED = 'DEADLINE_EXCEEDED';

/**
 * `extensions.code` of a field whose request was cancelled (its client left): nobody reads the answer, but the
 * server's own hooks see it.
 *
 * @example
 * ```ts
 * if (error.extensions?.code === CANCELLED) return; // the client left
 * ```
 */
export const CANCELLED = 'CANCELLED';

/**
 * The `extensions` of a deadline's field error.
 *
 * @example
 * ```ts
 * const { exceededBy } = error.extensions as DeadlineErrorExtensions;
 * ```
 */
export interface DeadlineErrorExtensions {
  code: typeof DEADLINE_EXCEEDED | typeof CANCELLED;
  /** The hop whose deadline fired: this service's name, or a downstream's that reported its own. */
  exceededBy?: string;
}

/** Why a field has no value: cut while it ran, not started, or its request cancelled. @internal */
export type FieldStop =
  | { kind: 'cut'; exceededBy: string }
  | { kind: 'not-started'; exceededBy: string; leftMs: number; needsMs: number }
  | { kind: 'cancelled' };

/** @internal */
export function fieldError(info: GraphQLResolveInfo, stop: FieldStop): GraphQLError {
  const message =
    stop.kind === 'cut'
      ? `The request's deadline passed before ${info.parentType.name}.${info.fieldName} resolved`
      : stop.kind === 'not-started'
        ? `Not started: ${Math.max(0, Math.floor(stop.leftMs))} ms left, ${info.parentType.name}.${info.fieldName} needs ${stop.needsMs} ms`
        : 'The request was cancelled';
  const extensions: DeadlineErrorExtensions =
    stop.kind === 'cancelled' ? { code: CANCELLED } : { code: DEADLINE_EXCEEDED, exceededBy: stop.exceededBy };
  const error = new GraphQLError(message, {
    nodes: info.fieldNodes,
    path: pathOf(info),
    extensions: { ...extensions },
  });
  error.stack = `GraphQLError: ${message}`;
  return error;
}

/**
 * The request-level error of an answer with no data (the hop's own, when the server gave none in time).
 * @internal
 */
export function requestDeadlineError(exceededBy: string): { message: string; extensions: DeadlineErrorExtensions } {
  return {
    message: "The request's deadline passed before it was answered",
    extensions: { code: DEADLINE_EXCEEDED, exceededBy },
  };
}

function pathOf(info: GraphQLResolveInfo): Array<string | number> {
  const path: Array<string | number> = [];
  for (let at: GraphQLResolveInfo['path'] | undefined = info.path; at !== undefined; at = at.prev) path.push(at.key);
  return path.reverse();
}
