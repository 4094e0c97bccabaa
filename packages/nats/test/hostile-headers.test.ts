/**
 * Malformed and hostile budget headers never crash a consumer: a property over every reading path (the budget, its
 * wall-clock form, the trace, a reply's deadline answer), with header tables no client would build; then a sample of
 * such values over the real server, into a wrapped subscription that must go on serving.
 */
import { currentContext } from '@deadline/core';
import { type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NATS, requireService } from '../../../test/support/services.ts';
import { exceededByOf } from '../src/deadline-answer.ts';
import { deliver } from '../src/deliver.ts';
import { withDeadline } from '../src/index.ts';
import type { NatsHeadersLike, NatsMsgLike } from '../src/nats-types.ts';
import { resolveNatsOptions } from '../src/options.ts';
import { connectNats, runPrefix, signal } from './support.ts';

const NAMES = [
  'x-request-deadline',
  'X-Request-Deadline',
  'x-request-deadline-at',
  'X-REQUEST-DEADLINE-AT',
  'grpc-timeout',
  'connect-timeout-ms',
  'x-envoy-expected-rq-timeout-ms',
  'traceparent',
  'tracestate',
  'x-deadline-exceeded-by',
];

const value = fc.oneof(
  fc.string({ unit: 'binary' }),
  fc.constantFrom('0', '-1', '1e309', 'NaN', 'Infinity', '0x10', ' 5 ', '5,6', '', '99999999999999999999', '1.5'),
  fc.bigInt({ min: -(10n ** 20n), max: 10n ** 20n }).map(String),
  fc.integer({ min: 0, max: 2 ** 31 }).map((n) => String(Date.now() + n - 2 ** 30)),
  fc.constant(undefined as unknown as string),
  fc.constant(42 as unknown as string),
);

const table = fc.array(fc.tuple(fc.oneof(fc.constantFrom(...NAMES), fc.string()), fc.array(value, { maxLength: 3 })), {
  maxLength: 8,
});

/** Headers as a client would hand them over, or not: a table, a throwing one, and things that are no headers. */
const headers = fc.oneof(
  table.map((entries): NatsHeadersLike => fakeHeaders(entries)),
  fc.constant({
    [Symbol.iterator]() {
      throw new Error('hostile');
    },
  } as unknown as NatsHeadersLike),
  fc.constantFrom(undefined, null, 'x-request-deadline: 5', 7, [] as unknown) as fc.Arbitrary<NatsHeadersLike>,
);

function fakeHeaders(entries: [string, string[]][]): NatsHeadersLike {
  return {
    [Symbol.iterator]: () => entries[Symbol.iterator](),
    get: (name) => entries.find(([k]) => k === name)?.[1][0] ?? '',
    values: (name) => entries.find(([k]) => k === name)?.[1] ?? [],
    code: 0,
  };
}

describe('hostile headers: the reading path', () => {
  const options = resolveNatsOptions({ serviceName: 'fuzz', minMs: 0 });

  it('never throws, and a handler that runs has a budget within the service’s limits', () => {
    fc.assert(
      fc.property(headers, fc.boolean(), (given, isRequest) => {
        let budget: number | undefined;
        let answered = 0;
        const msg: NatsMsgLike = {
          subject: 'fuzz.subject',
          reply: isRequest ? '_INBOX.fuzz' : '',
          headers: given,
          data: new Uint8Array(0),
          respond: () => {
            answered++;
            return true;
          },
        };
        deliver(msg, 'fuzz.subject', options, () => {
          budget = currentContext()?.deadline.budgetMs;
        });
        if (budget !== undefined) {
          expect(budget).toBeGreaterThan(0);
          expect(budget).toBeLessThanOrEqual(isRequest ? 60_000 : 2 ** 31 - 1);
          expect(answered).toBe(0);
        } else {
          // Refused: a request gets the deadline answer, once.
          expect(answered).toBe(isRequest ? 1 : 0);
        }
        exceededByOf(msg);
      }),
      { numRuns: 2_000 },
    );
  });
});

const available = await requireService(NATS);
const RUN = runPrefix('hostile');

describe.runIf(available)('hostile headers over the real server', () => {
  let nc: NatsConnection;
  beforeAll(async () => {
    nc = await connectNats();
  });
  afterAll(async () => {
    await nc?.close();
  });

  it('a wrapped subscription serves on: each hostile message handled with a sane budget, or refused', async () => {
    const subject = `${RUN}.serve`;
    const budgets: number[] = [];
    const bus = withDeadline(nc, { serviceName: 'hostile' });
    bus.subscribe(subject, {
      callback: (_error, msg) => {
        budgets.push(currentContext()?.deadline.budgetMs ?? Number.NaN);
        msg.respond('ok');
      },
    });
    await nc.flush();
    const hostile: [string, string][] = [
      ['x-request-deadline', '-1'],
      ['x-request-deadline', '1e309'],
      ['x-request-deadline', '9'.repeat(40)],
      ['x-request-deadline', 'NaN'],
      ['X-Request-Deadline', '0x10'],
      ['x-request-deadline', '5,6'],
      ['x-request-deadline-at', 'yesterday'],
      ['x-request-deadline-at', '-5'],
      ['x-request-deadline-at', '9'.repeat(30)],
      ['traceparent', 'ff-00000000000000000000000000000000-0000000000000000-zz'],
      ['grpc-timeout', '99999999999H'],
      ['x-deadline-exceeded-by', '\u0000'],
    ];
    let answered = 0;
    for (const [name, text] of hostile) {
      const h = natsHeaders();
      h.append(name, text);
      if (name === 'x-request-deadline-at') h.set('x-request-deadline', '1000');
      const reply = await nc.request(subject, 'hi', { headers: h, timeout: 5_000 });
      if (reply.string() === 'ok') answered++;
    }
    // Two values of one budget header, and a deadline far past on the publisher's clock.
    const twice = natsHeaders();
    twice.append('x-request-deadline', '100');
    twice.append('x-request-deadline', '200');
    expect((await nc.request(subject, 'hi', { headers: twice, timeout: 5_000 })).string()).toBe('ok');
    const past = natsHeaders();
    past.set('x-request-deadline', '1000');
    past.set('x-request-deadline-at', String(Date.now() - 60_000));
    const refused = await nc.request(subject, 'hi', { headers: past, timeout: 5_000 });
    expect(refused.headers?.code).toBe(504);
    // Each is ignored as a budget (a negative one too: not a number of ms), so the service's default applies.
    expect(answered).toBe(hostile.length);
    for (const budget of budgets) {
      expect(budget).toBeGreaterThan(0);
      expect(budget).toBeLessThanOrEqual(15_000);
    }
    // Still serving.
    const done = signal();
    nc.request(subject, 'hi', { timeout: 5_000 }).then(() => done.resolve());
    await done.promise;
  });
});
