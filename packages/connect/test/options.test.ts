/**
 * Options are checked once, naming the bad one. What the interceptor's `trust` and `logger` options do on a real
 * call is the shared RPC suite's (test/support/rpc-client-conformance.ts, run by connect.test.ts in both protocols).
 */
import { createGrpcTransport } from '@connectrpc/connect-node';
import { InvalidArgumentError } from '@deadline/core';
import { describe, expect, it } from 'vitest';
import { deadlineInterceptor, withDeadline } from '../src/index.ts';

describe('options', () => {
  it('are checked when the transport is wrapped or the interceptor made, naming the bad one', () => {
    const transport = createGrpcTransport({ baseUrl: 'http://127.0.0.1:9' });
    const bad = (make: () => unknown, option: string) => {
      expect(make).toThrow(InvalidArgumentError);
      expect(make).toThrow(new RegExp(`^${option} `));
    };
    bad(() => withDeadline(transport, { marginMs: -1 }), 'marginMs');
    bad(() => withDeadline(transport, { defaultMs: Number.POSITIVE_INFINITY }), 'defaultMs');
    bad(() => deadlineInterceptor({ minMs: 20, defaultMs: 10 }), 'minMs');
    bad(() => deadlineInterceptor({ trust: 'yes' as never }), 'trust');
    bad(() => deadlineInterceptor({ cancelOnEnd: 1 as never }), 'cancelOnEnd');
    bad(() => deadlineInterceptor({ admission: [] as never }), 'admission');
    bad(() => deadlineInterceptor({ admission: { exempt: true as never } }), 'admission.exempt');
  });
});
