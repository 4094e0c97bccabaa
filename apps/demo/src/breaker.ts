/** The demo's circuit breaker around inventory: demo-sized, so a scenario (or a soak's fault) trips it and it heals within seconds. */

/**
 * A breaker that opens after 5 failures of 10 calls and probes again after a second.
 *
 * @example
 * ```ts
 * await startOrders({ inventoryUrl, pool, logger, breaker: DEMO_BREAKER });
 * ```
 */
export const DEMO_BREAKER = { minimumCalls: 5, failureThreshold: 5, cooldownMs: 1_000, successesToClose: 2 };
