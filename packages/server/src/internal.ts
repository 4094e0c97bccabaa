/**
 * `@deadline/server/internal` — the request lifecycle for this project's framework adapters. No semver promise.
 * @packageDocumentation
 */

export { admitRequest } from './admission.js';
export {
  budgetReader,
  createParser,
  isLongLived,
  isTrusted,
  resolveBudget,
  type ServiceParser,
} from './budget.js';
export {
  noteRequestStarts,
  READS_OF_SWAPPED_REQUESTS_ARE_SLOW,
  requestLogger,
  takeStartedRequest,
} from './engine-paths.js';
export { emitInContext, needsRequestContext, needsResponseContext } from './events-in-context.js';
export { type LearnedRoute, LearnedRoutes } from './learned-routes.js';
export {
  longLivedLimits,
  type ResolvedLimits,
  type ResolvedOptions,
  resolveLimits,
  resolveOptions,
} from './options.js';
export { rawHost } from './raw-host.js';
export {
  type DeadlineAnswerClaim,
  type RequestHost,
  RequestState,
  reportHookError,
  requestStateOf,
  requestTrace,
  startRequest,
} from './request-deadline.js';
export { type DeadlineAnswer, deadlineAnswer, silenceLateWrites, writeAnswer } from './respond.js';
export { finishWithResponse } from './response-end.js';
