/**
 * A field's own limits: at most `maxMs` of the request's remaining time, and not started with less than `minMs`
 * left. Given in the schema with the `@deadline` directive, or in a code-first field's `extensions.deadline`.
 */
import type { GraphQLField } from 'graphql';

/**
 * The `@deadline` directive's definition, to add to a schema's type definitions.
 *
 * @example
 * ```ts
 * const typeDefs = [deadlineDirectiveTypeDefs, `type Query { report: Report @deadline(maxMs: 800, minMs: 50) }`];
 * ```
 */
export const deadlineDirectiveTypeDefs = 'directive @deadline(maxMs: Int, minMs: Int) on FIELD_DEFINITION';

/**
 * A field's limits, in ms: `extensions: { deadline: { maxMs: 800 } }` on a code-first field.
 *
 * @example
 * ```ts
 * const report: GraphQLFieldConfig<unknown, unknown> = { type: Report, resolve, extensions: { deadline: { maxMs: 800 } } };
 * ```
 */
export interface FieldLimits {
  /** The most of the request's remaining time the field's resolver gets; cut after it. */
  maxMs?: number | undefined;
  /**
   * The field is not started with less time left than this: reported as cut, at once. Without it, the field's own
   * fastest typical time, learned, is the bar.
   */
  minMs?: number | undefined;
}

/** Checked limits: `maxMs` Infinity and `minMs` 0 when not given. @internal */
export interface ResolvedFieldLimits {
  readonly maxMs: number;
  readonly minMs: number;
}

const NONE: ResolvedFieldLimits = { maxMs: Number.POSITIVE_INFINITY, minMs: 0 };

/**
 * The field's limits, from its directive or its extensions (the directive wins). A value that is not a positive
 * finite number of ms is an error naming the field: a schema is read once, at start.
 * @internal
 */
export function limitsOf(field: GraphQLField<unknown, unknown>, typeName: string): ResolvedFieldLimits {
  const fromExtensions = (field.extensions as { deadline?: FieldLimits } | undefined)?.deadline;
  const directive = field.astNode?.directives?.find((node) => node.name.value === 'deadline');
  let maxMs = fromExtensions?.maxMs;
  let minMs = fromExtensions?.minMs;
  for (const argument of directive?.arguments ?? []) {
    const value = argument.value.kind === 'IntValue' ? Number(argument.value.value) : Number.NaN;
    if (argument.name.value === 'maxMs') maxMs = value;
    else if (argument.name.value === 'minMs') minMs = value;
  }
  if (maxMs === undefined && minMs === undefined) return NONE;
  return { maxMs: checkMs(typeName, field.name, 'maxMs', maxMs), minMs: checkMs(typeName, field.name, 'minMs', minMs) };
}

function checkMs(typeName: string, fieldName: string, name: string, value: unknown): number {
  if (value === undefined) return name === 'maxMs' ? Number.POSITIVE_INFINITY : 0;
  if (typeof value === 'number' && Number.isFinite(value) && value > 0) return value;
  throw new TypeError(
    `@deadline on ${typeName}.${fieldName}: ${name} must be a positive number of milliseconds, got ${String(value)}`,
  );
}

/** Whether `limits` ask for anything. @internal */
export function hasLimits(limits: ResolvedFieldLimits): boolean {
  return limits !== NONE;
}
