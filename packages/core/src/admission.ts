/**
 * Admission: whether a request that just arrived can still finish in what is left of its budget, decided before any
 * of its work runs (its body read, its handler called). Each route learns its own time (a {@link ServiceTime} of the
 * requests it answered), the process knows its queue (the event loop's delay, {@link loopDelayMs}); a request is
 * refused when
 * - less is left than the route's fastest typical time (its 10th percentile): it could not finish even on an idle
 *   server (`too-little-time`, answered as this hop's deadline: 504, gRPC `DEADLINE_EXCEEDED`);
 * - the server is loaded (a queue of at least {@link LOADED_MS}) and what is left cannot cover the queue twice plus
 *   the route's expected time (its 90th percentile by default): it would most likely miss, and the time it would
 *   take is what the requests that can finish need (`overloaded`, 503 with `Retry-After`, gRPC `UNAVAILABLE`:
 *   another replica, or this one a moment later, may serve it);
 * - the server is loaded and a trusted caller marked the request as one to shed first (`low-priority`, 503).
 *
 * On an idle server only the first rule refuses, and only what could not finish anyway: no request that would have
 * been answered in time is refused there. A route's estimate is made of the requests it answered and of those cut
 * at their deadline or left by their client, each counted at what it took: a cut request took at least that long, and
 * leaving it out would teach the route only its survivors' times — under overload, the few that were fast — and let
 * in the many that will not be. Errors say nothing of how long an answer takes and are left out. An estimate that
 * refuses is tested by letting a request through whenever the route has none in flight (a probe), and a probe that
 * finishes well under it fades its history.
 *
 * Why the queue counts twice: a request read after a busy stretch has been waiting unseen — in its socket, while the
 * loop ran — for up to that stretch, and its budget, anchored only now, does not show it; and it has the queue's
 * wait still ahead (the requests let in before it, whose answers come after the stretch). On the CPU-bound chain at
 * 3× its capacity, counting it once let in requests that then missed (goodput 50/s, dead work 11 %); twice, 89/s and
 * 6.4 % (docs/benchmarks.md), with no refusal at or below capacity either way.
 */
import { loopDelayMs } from './loop-delay.js';
import { ServiceTime } from './service-time.js';

/** Why a request was refused at arrival (see the module's comment). @example `if (reason === 'overloaded') retryLater()` */
export type AdmissionReason = 'overloaded' | 'too-little-time' | 'low-priority';

/**
 * A refusal: why, and the figures behind it.
 *
 * @example
 * ```ts
 * const refusal = admission.check(route, remainingMs, undefined);
 * if (!refusal.admitted) log.info({ reason: refusal.reason, neededMs: refusal.neededMs }, 'refused');
 * ```
 * @internal
 */
export interface AdmissionRefusal {
  readonly admitted: false;
  readonly reason: AdmissionReason;
  /** What the request had left at arrival, in ms. */
  readonly remainingMs: number;
  /** What the request would have needed, in ms: the queue twice plus the route's time (see the module's comment). */
  readonly neededMs: number;
  /** The server's queue (event-loop delay) at arrival, in ms. */
  readonly queueMs: number;
  /** For `Retry-After`: when the queue should have drained, in whole seconds (at least 1). */
  readonly retryAfterS: number;
  /** For gRPC's `grpc-retry-pushback-ms`: the same, in whole ms (at least 1). */
  readonly retryAfterMs: number;
}

/** A request let in; `probe` when the route's estimate alone would have refused it (see the module's comment). @internal */
export interface AdmissionPass {
  readonly admitted: true;
  readonly probe: boolean;
}

/** The verdict on one request. @example `const verdict = admission.check(route, remainingMs, urgency)` @internal */
export type AdmissionVerdict = AdmissionPass | AdmissionRefusal;

/** A queue at least this long (ms of event-loop delay) means the server is loaded. */
export const LOADED_MS = 10;
/** The percentile below which a request's remaining time could not get an answer even from an idle server. */
const FLOOR_QUANTILE = 0.1;
/** How many routes are told apart; requests of routes beyond are counted together (a bounded table). */
const MAX_ROUTES = 1_000;
/** Samples after which a route's old samples count half: a few seconds of a busy route. */
const HALF_LIFE = 100;
/** How much a probe that finished under the floor fades the route's history: two half-lives' worth. */
const PROBE_FADE = 0.25;

const PASS: AdmissionPass = Object.freeze({ admitted: true, probe: false });
const PROBE: AdmissionPass = Object.freeze({ admitted: true, probe: true });

/**
 * One route's (or RPC method's) time and the requests of it running now.
 *
 * @example
 * ```ts
 * const route = admission.route('GET /orders/:id');
 * route.enter();
 * res.once('close', () => route.leave(performance.now() - arrivedAt, ok, false));
 * ```
 * @internal
 */
export class AdmissionRoute {
  readonly time: ServiceTime;
  /** Requests of this route admitted and not yet ended. */
  inFlight = 0;
  /**
   * Whether the route's requests are long-lived (server-sent events, long polls): never judged. Set by an adapter that
   * learns it only once a request ran (a mark made by the route's own middleware or decorator).
   */
  longLived = false;

  constructor(
    readonly key: string,
    quantile: number,
  ) {
    this.time = new ServiceTime({ quantile, halfLife: HALF_LIFE });
  }

  /** A request of the route was admitted. */
  enter(): void {
    this.inFlight++;
  }

  /**
   * A request admitted ended: `counts` when it teaches the route its time (answered, or cut after `elapsedMs`; not an
   * error), `probe` as its verdict said.
   */
  leave(elapsedMs: number, counts: boolean, probe: boolean): void {
    if (this.inFlight > 0) this.inFlight--;
    if (!counts) return;
    if (probe) {
      const floor = this.time.estimate(FLOOR_QUANTILE);
      if (floor !== undefined && elapsedMs < floor) this.time.fade(PROBE_FADE);
    }
    this.time.record(elapsedMs);
  }

  /**
   * The first rule alone (see the module's comment), for `remainingMs` left: a refusal (`too-little-time`) when less
   * is left than the route's fastest typical time and another of its requests is running; a probe when none is;
   * `undefined` when enough is left, or nothing is known yet. `queueMs` goes into a refusal as it is.
   */
  judgeFloor(remainingMs: number, queueMs: number): AdmissionVerdict | undefined {
    const floor = this.time.estimate(FLOOR_QUANTILE);
    if (floor === undefined || remainingMs >= floor) return undefined;
    // The estimate alone says no: tested by a request whenever none of the route's is running.
    if (this.inFlight === 0) return PROBE;
    return refusal('too-little-time', remainingMs, floor, queueMs);
  }
}

/**
 * A service's admission: its routes, and the verdict on each request as it arrives (see the module's comment).
 *
 * @example
 * ```ts
 * const admission = new Admission(0.9);
 * const verdict = admission.check(admission.route('GET /orders/:id'), state.remainingMs(), undefined);
 * ```
 * @internal
 */
export class Admission {
  readonly #routes = new Map<string, AdmissionRoute>();
  readonly #quantile: number;
  #overflow: AdmissionRoute | undefined;

  /**
   * `quantile`: the percentile of a route's time a request must have left, beside the queue, while the server is
   * loaded (checked by the caller: 0.5 ≤ quantile < 1).
   */
  constructor(quantile = 0.9) {
    this.#quantile = quantile;
  }

  /** The route named `key`; past {@link MAX_ROUTES} distinct keys, one route shared by the rest. */
  route(key: string): AdmissionRoute {
    let route = this.#routes.get(key);
    if (route !== undefined) return route;
    if (this.#routes.size >= MAX_ROUTES) {
      this.#overflow ??= new AdmissionRoute('*', this.#quantile);
      return this.#overflow;
    }
    route = new AdmissionRoute(key, this.#quantile);
    this.#routes.set(key, route);
    return route;
  }

  /**
   * The verdict on a request of `route` with `remainingMs` left as it arrives. `urgency` is the trusted caller's
   * RFC 9218 urgency (0 most urgent … 7; 3 when unset): above 3 it is shed first under load, below 3 it is not
   * refused for the load (only when it could not finish at all).
   */
  check(route: AdmissionRoute, remainingMs: number, urgency: number | undefined): AdmissionVerdict {
    const queueMs = loopDelayMs();
    const floored = route.judgeFloor(remainingMs, queueMs);
    if (floored !== undefined) return floored;
    if (queueMs < LOADED_MS || (urgency !== undefined && urgency < 3)) return PASS;
    const neededMs = 2 * queueMs + (route.time.estimate() ?? 0);
    if (urgency !== undefined && urgency > 3) return refusal('low-priority', remainingMs, neededMs, queueMs);
    return remainingMs < neededMs ? refusal('overloaded', remainingMs, neededMs, queueMs) : PASS;
  }
}

function refusal(reason: AdmissionReason, remainingMs: number, neededMs: number, queueMs: number): AdmissionRefusal {
  return {
    admitted: false,
    reason,
    remainingMs,
    neededMs,
    queueMs,
    retryAfterS: Math.max(1, Math.ceil(queueMs / 1_000)),
    retryAfterMs: Math.max(1, Math.ceil(queueMs)),
  };
}

/**
 * What a refusal for load says, for a protocol that answers with a message (gRPC's details, a Connect error's).
 *
 * @example
 * ```ts
 * callback({ code: status.UNAVAILABLE, details: shedMessage(incoming.shed, 'inventory') });
 * ```
 * @internal
 */
export function shedMessage(refusal: AdmissionRefusal, hop: string): string {
  const why = refusal.reason === 'low-priority' ? 'shedding low-priority calls' : 'overloaded';
  return `${hop} is ${why}: ${Math.floor(refusal.remainingMs)} ms left, ${Math.ceil(refusal.neededMs)} ms needed (a queue of ${Math.round(refusal.queueMs)} ms)`;
}
