/**
 * `@deadline/http` — outgoing HTTP inside a request's deadline: every call carries the remaining budget, is not
 * made without time left, and is cut off (socket closed) when the budget runs out or the request is cancelled.
 * @packageDocumentation
 */

export { type AxiosConfigLike, type AxiosInstanceLike, deadlineAxios } from './axios.js';
export { DeadlineDispatcher, type DispatcherOptions } from './dispatcher.js';
export { createFetch, fetch } from './fetch.js';
export { installGlobalDispatcher } from './global-dispatcher.js';
export {
  deadlineGot,
  type GotDeadlineExtension,
  type GotErrorLike,
  type GotOptionsLike,
  type GotResponseLike,
} from './got.js';
export { deadlineInterceptor } from './interceptor.js';
export type { HttpDeadlineOptions } from './options.js';
export { type PreparedHttpRequest, prepareHttpRequest } from './prepare-request.js';
export { describeTarget, type TargetRequest } from './target.js';
