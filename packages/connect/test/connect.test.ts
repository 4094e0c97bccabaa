/**
 * @deadline/connect over real Connect (connect-node on node:http2) on loopback, in both the gRPC and the Connect
 * protocol. What every RPC adapter must do is the shared suite's (test/support/rpc-client-conformance.ts: unary
 * calls both ways, the service's options; streams.test.ts runs its server streams), run here once per protocol;
 * here besides, what is Connect's own: its circuit breaker refusing a service it cannot reach, no socket opened.
 */
import diagnostics from 'node:diagnostics_channel';
import { Code, type ConnectError } from '@connectrpc/connect';
import { runWithDeadline } from '@deadline/core';
import { CircuitBreaker, CircuitOpenError } from '@deadline/resilience';
import { describe, expect, it } from 'vitest';
import { rpcClientConformance } from '../../../test/support/rpc-client-conformance.ts';
import { client, connectDriver, type Protocol } from './support.ts';

const fail = (work: Promise<unknown>) =>
  work.then(
    () => {
      throw new Error('expected the call to fail');
    },
    (error: unknown) => error as ConnectError,
  );

for (const protocol of ['grpc', 'connect'] as const) rpcClientConformance(connectDriver(protocol));

describe.each<Protocol>(['grpc', 'connect'])(
  'an outgoing call over the %s protocol, as Connect makes it',
  (protocol) => {
    it('is refused with unavailable, nothing sent, once its circuit breaker opens', async () => {
      const breaker = new CircuitBreaker({ target: 'stock', failureThreshold: 2, minimumCalls: 2, cooldownMs: 60_000 });
      // Nothing listens here: each call fails to connect (unavailable), a failure the breaker counts.
      const c = client('http://127.0.0.1:9', protocol, { circuitBreaker: breaker });
      for (let i = 0; i < 2; i++) {
        expect((await fail(runWithDeadline(2_000, () => c.inspect({})))).code).toBe(Code.Unavailable);
      }
      let sockets = 0;
      const onSocket = () => sockets++;
      diagnostics.subscribe('net.client.socket', onSocket);
      const refused = await fail(runWithDeadline(2_000, () => c.inspect({})));
      diagnostics.unsubscribe('net.client.socket', onSocket);
      expect(refused.code).toBe(Code.Unavailable);
      expect(refused.cause).toBeInstanceOf(CircuitOpenError);
      expect(sockets).toBe(0);
    });
  },
);
