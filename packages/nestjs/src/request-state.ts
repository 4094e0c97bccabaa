/**
 * The request's deadline, as the platform's adapter left it on the request: `req.deadline` on express,
 * `request.deadline` on fastify.
 */
import { RequestState } from '@deadline/server/internal';

/** The request's state, if the module's adapter started one. @internal */
export function stateOf(request: unknown): RequestState | undefined {
  const state = (request as { deadline?: unknown } | undefined)?.deadline;
  return state instanceof RequestState ? state : undefined;
}
