/**
 * Admission on a server hop: the `admission` option, and the verdict on each request as it arrives, before its body
 * is read or any of the app's hooks and handlers run. The rule and the estimates are the core's (its admission.ts);
 * this file translates them into HTTP — a refusal answered 503 with `Retry-After` when the server is overloaded, or
 * as this hop's deadline (504) when the request could not finish at all — and tells each route how long the requests
 * it let in took.
 */
import type { IncomingHttpHeaders } from 'node:http';
import {
  type AdmissionRoute,
  isExempt,
  monotonicNow,
  publishAdmissionRefused,
  type ResolvedAdmission,
} from '@deadline/core/internal';
import { parseUrgency } from '@deadline/core/wire';
import type { LineLogger } from './options.js';
import { type RequestState, reportHookError } from './request-deadline.js';

/**
 * The verdict on `state`'s request, of route `routeKey`, as it arrives: returns whether it may run. `longLived`: the
 * adapter knows the route to be long-lived (its requests were before). A refused request is answered now (its line
 * is logged when its response is over); an admitted one tells its route how long it took, once its response is over.
 * @internal
 */
export function admitRequest<Req>(
  admission: ResolvedAdmission<Req>,
  state: RequestState,
  req: Req,
  headers: IncomingHttpHeaders,
  routeKey: string,
  logger: LineLogger | undefined,
  longLived = false,
): boolean {
  const onError = (error: unknown) => reportHookError(logger, 'admission.exempt', error, state.options.hop);
  if (longLived || state.longLived || isExempt(admission, req, onError)) return true;
  const route = admission.engine.route(routeKey);
  if (route.longLived) return true;
  // RFC 9218's urgency, from callers trusted to lengthen their budget: anyone else could buy a place ahead.
  const urgency = state.budget.trusted ? parseUrgency(headers.priority) : undefined;
  const remainingMs = state.remainingMs();
  const verdict = admission.engine.check(route, remainingMs, urgency);
  if (verdict.admitted) {
    follow(route, state, verdict.probe);
    return true;
  }
  publishAdmissionRefused({
    protocol: 'http',
    hop: state.options.hop,
    route: routeKey,
    reason: verdict.reason,
    remainingMs,
    neededMs: verdict.neededMs,
    queueMs: verdict.queueMs,
  });
  if (verdict.reason === 'too-little-time') {
    state.refuse(
      `not starting: ${Math.floor(remainingMs)} ms left, and this route's requests take at least ${Math.ceil(verdict.neededMs)} ms`,
    );
  } else {
    state.shed(verdict);
  }
  return false;
}

/**
 * Tells the route how long the request took once its response is over (the state's outcome is known by then), and
 * whether it turned long-lived (Nest's `@Deadline(false)`, a route's `longLived()`): a route known by its pattern is
 * then never judged again. (A key without a path, a method's, stands for many routes.)
 */
function follow(route: AdmissionRoute, state: RequestState, probe: boolean): void {
  route.enter();
  const res = state.res;
  if (res === undefined) return;
  res.once('close', () => {
    const outcome = state.outcome;
    // An error says nothing of the route's time; a request cut took at least what it took (core's admission.ts).
    const counts = outcome === 'ok' || outcome === 'deadline_exceeded' || outcome === 'cancelled';
    route.leave(monotonicNow() - state.arrivedAt, counts, probe);
    if (state.longLived && route.key.includes('/')) route.longLived = true;
  });
}
