/**
 * Puts every resolver of a schema under the request's deadline, in place: each field with a resolver of its own
 * (and each with limits of its own, whatever resolves it) gets {@link underDeadline}'s wrapper, once. In place
 * because each server holds its schema itself (Apollo's, yoga's, Mercurius's); OpenTelemetry's GraphQL
 * instrumentation does the same. Fields resolved by the default resolver read a property: nothing to wait for, so
 * they are left alone and cost nothing.
 */
import { defaultFieldResolver, type GraphQLSchema, isIntrospectionType, isObjectType } from 'graphql';
import { hasLimits, limitsOf } from './field-limits.js';
import { subscribeUnderDeadline, underDeadline, WRAPPED } from './run-field.js';

const instrumented = new WeakSet<GraphQLSchema>();

/**
 * Wraps the resolvers of `schema` (its subscription fields' `subscribe` too) to run under the request's deadline.
 * Idempotent; the plugins call it for each schema they execute, so a schema replaced at run time is covered too.
 * Returns the schema.
 *
 * @example
 * ```ts
 * const schema = instrumentSchema(makeExecutableSchema({ typeDefs, resolvers }));
 * ```
 */
export function instrumentSchema(schema: GraphQLSchema): GraphQLSchema {
  if (instrumented.has(schema)) return schema;
  instrumented.add(schema);
  for (const type of Object.values(schema.getTypeMap())) {
    if (!isObjectType(type) || isIntrospectionType(type)) continue;
    for (const field of Object.values(type.getFields())) {
      const limits = limitsOf(field, type.name);
      const coordinate = `${type.name}.${field.name}`;
      const resolve = field.resolve;
      if (resolve !== undefined && !(WRAPPED in resolve)) field.resolve = underDeadline(resolve, limits, coordinate);
      else if (resolve === undefined && hasLimits(limits))
        field.resolve = underDeadline(defaultFieldResolver, limits, coordinate);
      const subscribe = field.subscribe;
      if (subscribe !== undefined && !(WRAPPED in subscribe)) field.subscribe = subscribeUnderDeadline(subscribe);
    }
  }
  return schema;
}
