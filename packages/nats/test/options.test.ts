/** Options are checked when the connection is wrapped, each error naming the option and the value received. */
import { InvalidArgumentError } from '@deadline/core';
import { describe, expect, it } from 'vitest';
import { handle, withDeadline, withJetStreamContext, withTrace } from '../src/index.ts';

const nc = { publish() {}, request: async () => ({}), subscribe: () => ({}) } as never;

describe('options', () => {
  it.each([
    [{ clockSkewMs: -1 }, /clockSkewMs/],
    [{ clockSkewMs: 'soon' }, /clockSkewMs/],
    [{ defaultMs: 0 }, /defaultMs/],
    [{ serviceName: 'has space' }, /serviceName/],
    [{ publish: { marginMs: -5 } }, /marginMs/],
    [{ publish: 'fast' }, /publish/],
    [{ trust: true }, /trust/],
    [{ logger: {} }, /logger/],
  ])('withDeadline(nc, %o) throws naming the option', (options, name) => {
    expect(() => withDeadline(nc, options as never)).toThrow(InvalidArgumentError);
    expect(() => withDeadline(nc, options as never)).toThrow(name);
  });

  it('refuses what is not a connection or a JetStream client', () => {
    expect(() => withDeadline({} as never)).toThrow(/nc must be a NATS connection/);
    expect(() => withTrace({} as never)).toThrow(/js must be a JetStream client/);
    expect(() => withTrace({ publish: async () => ({}) }, { minMs: -1 })).toThrow(/minMs/);
  });

  it('checks the helpers’ options', async () => {
    expect(() => withJetStreamContext(async () => {}, { budgetMs: 0 })).toThrow(/budgetMs/);
    expect(() => withJetStreamContext(async () => {}, { serviceName: '' })).toThrow(/serviceName/);
    expect(() => withJetStreamContext('no' as never)).toThrow(/handler/);
    const bus = withDeadline({
      publish() {},
      request: async () => ({}),
      subscribe: () => ({ [Symbol.asyncIterator]: async function* () {} }),
    } as never);
    await expect(handle(bus.subscribe('x') as never, () => {}, { concurrency: 0 })).rejects.toThrow(/concurrency/);
  });
});
