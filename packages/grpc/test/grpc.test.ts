/**
 * @deadline/grpc over real grpc-js on loopback. What every RPC adapter must do is the shared suite's
 * (test/support/rpc-client-conformance.ts: unary calls both ways, the service's options; streams.test.ts runs its
 * server streams); here, what is grpc-js's own: a call's own interceptors (which replace the client's), and its
 * circuit breaker refusing a failing service.
 */
import { runWithDeadline } from '@deadline/core';
import { CircuitBreaker, CircuitOpenError } from '@deadline/resilience';
import grpc, { type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rpcClientConformance } from '../../../test/support/rpc-client-conformance.ts';
import { client, events, grpcDriver, type Seen, type Served, serve, unary } from './support.ts';

rpcClientConformance(grpcDriver);

let inventory: Served;

beforeAll(async () => {
  inventory = await serve({ serviceName: 'inventory', defaultMs: 1_500, maxMs: 5_000 });
});
afterAll(async () => {
  await inventory?.close();
});

describe('an outgoing call, as grpc-js makes it', () => {
  it("is bounded even when the call brings interceptors of its own, which replace the client's", async () => {
    const passThrough: grpc.Interceptor = (options, nextCall) => new grpc.InterceptingCall(nextCall(options));
    const c = client(inventory.address, { marginMs: 50 }, { interceptors: [passThrough] });
    const seen = await runWithDeadline(800, () => unary<Seen>(c, 'inspect', {}, { interceptors: [passThrough] }));
    expect(seen.budgetMs).toBeLessThanOrEqual(750);
    c.close();
  });

  it('is refused with UNAVAILABLE, nothing sent, once its circuit breaker opens', async () => {
    const failing = await serve({ serviceName: 'stock' }, () => Promise.reject(new Error('disk on fire')));
    const breaker = new CircuitBreaker({ target: 'stock', failureThreshold: 2, minimumCalls: 2, cooldownMs: 60_000 });
    const c = client(failing.address, { circuitBreaker: breaker });
    let reached = 0;
    const onError = () => reached++;
    events.on('query-error', onError);
    try {
      for (let i = 0; i < 2; i++) {
        const error = (await runWithDeadline(2_000, () => unary(c, 'query', { sql: 'x' })).catch(
          (e: ServiceError) => e,
        )) as ServiceError;
        expect(error.code).toBe(grpc.status.UNKNOWN);
      }
      const refused = (await runWithDeadline(2_000, () => unary(c, 'query', { sql: 'x' })).catch(
        (e: ServiceError) => e,
      )) as ServiceError;
      expect(refused.code).toBe(grpc.status.UNAVAILABLE);
      expect(refused.cause).toBeInstanceOf(CircuitOpenError);
      expect(reached).toBe(2);
    } finally {
      events.off('query-error', onError);
      c.close();
      await failing.close();
    }
  });
});
