/**
 * Options are checked once, naming the bad one. What the service's `trust` and `logger` options do on a real call
 * is the shared RPC suite's (test/support/rpc-client-conformance.ts, run by grpc.test.ts).
 */
import { InvalidArgumentError } from '@deadline/core';
import { describe, expect, it } from 'vitest';
import { DeadlineChannel, deadlineService, withDeadline } from '../src/index.ts';
import { Inventory, implementation } from './support.ts';

describe('options', () => {
  it('are checked when the client or the service is wrapped, naming the bad one', () => {
    const bad = (make: () => unknown, option: string) => {
      expect(make).toThrow(InvalidArgumentError);
      expect(make).toThrow(new RegExp(`^${option} `));
    };
    bad(() => withDeadline({}, { marginMs: -1 }), 'marginMs');
    bad(() => withDeadline({}, { defaultMs: 0 }), 'defaultMs');
    bad(() => withDeadline({}, { circuitBreaker: {} as never }), 'circuitBreaker');
    bad(() => new DeadlineChannel({} as never, { minMs: Number.NaN }), 'minMs');
    bad(() => deadlineService(Inventory.service, implementation(), { maxMs: 0 }), 'maxMs');
    bad(() => deadlineService(Inventory.service, implementation(), { defaultMs: 5_000, maxMs: 1_000 }), 'defaultMs');
    bad(() => deadlineService(Inventory.service, implementation(), { serviceName: 'a b' }), 'serviceName');
    bad(() => deadlineService(Inventory.service, implementation(), { headers: ['http'] as never }), 'headers');
    bad(() => deadlineService(Inventory.service, implementation(), { logger: {} as never }), 'logger');
    bad(() => deadlineService(Inventory.service, implementation(), { admission: 'on' as never }), 'admission');
    bad(
      () => deadlineService(Inventory.service, implementation(), { admission: { quantile: 1 } }),
      'admission.quantile',
    );
  });
});
