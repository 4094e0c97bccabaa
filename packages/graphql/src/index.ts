/**
 * `@deadline/graphql` — one budget for a whole GraphQL operation: resolvers that run inside the request's deadline,
 * stop when it passes, and a partial answer that says which fields ran out. The servers' plugins are on their own
 * entry points: `@deadline/graphql/apollo` (Apollo Server 5).
 * @packageDocumentation
 */

export { deadlineExecute } from './execute.js';
export {
  CANCELLED,
  DEADLINE_EXCEEDED,
  type DeadlineErrorExtensions,
} from './field-error.js';
export { deadlineDirectiveTypeDefs, type FieldLimits } from './field-limits.js';
export { type GraphQLDeadlineOptions, graphqlDeadlineAnswer } from './graphql-hop.js';
export { instrumentSchema } from './instrument-schema.js';
