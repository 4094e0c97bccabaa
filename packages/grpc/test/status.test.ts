/**
 * The mapping between gRPC statuses and the typed errors, both ways: a hop named in the trailer comes back as
 * `whose: 'downstream:<hop>'`; bad trailer values are ignored, never thrown on.
 */
import { CancelledError, DeadlineExceededError, InvalidArgumentError } from '@deadline/core';
import { Metadata, status } from '@grpc/grpc-js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fromGrpcStatus, toGrpcStatus } from '../src/index.ts';

/** A hop as a context may name it: 1–128 visible ASCII characters. */
const hop = fc.stringMatching(/^[\x21-\x7e]{1,128}$/);

describe('toGrpcStatus and fromGrpcStatus', () => {
  it('round-trip a deadline: the hop whose deadline fired is named on the other side', () => {
    fc.assert(
      fc.property(hop, fc.nat(60_000), (name, budgetMs) => {
        const error = new DeadlineExceededError({ phase: 'in-handler', hop: name, budgetMs, elapsedMs: budgetMs });
        const answered = toGrpcStatus(error);
        expect(answered?.code).toBe(status.DEADLINE_EXCEEDED);
        const back = fromGrpcStatus(
          { code: answered?.code, details: answered?.details, metadata: answered?.metadata },
          'inventory.Reserve',
        );
        expect(back).toBeInstanceOf(DeadlineExceededError);
        expect((back as DeadlineExceededError).whose).toBe(`downstream:${name}`);
        expect((back as DeadlineExceededError).target).toBe('inventory.Reserve');
      }),
    );
  });

  it('name this hop when the error does not name one', () => {
    const answered = toGrpcStatus(new DeadlineExceededError({ phase: 'in-handler' }), 'stock');
    expect(answered?.metadata.get('x-deadline-exceeded-by')).toEqual(['stock']);
  });

  it('map a cancellation to CANCELLED and back', () => {
    const answered = toGrpcStatus(new CancelledError('caller left'));
    expect(answered?.code).toBe(status.CANCELLED);
    expect(fromGrpcStatus({ code: status.CANCELLED, details: 'Cancelled on client' })).toBeInstanceOf(CancelledError);
  });

  it('leave other errors and statuses alone', () => {
    expect(toGrpcStatus(new Error('boom'))).toBeUndefined();
    expect(toGrpcStatus(new InvalidArgumentError('marginMs', 'a number', -1))).toBeUndefined();
    expect(fromGrpcStatus({ code: status.NOT_FOUND, details: 'no such sku' })).toBeUndefined();
    expect(fromGrpcStatus({ code: status.OK })).toBeUndefined();
  });

  it('read any trailer value without throwing: a hop when it is a non-empty string, local otherwise', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string(),
          fc.uint8Array().map((bytes) => Buffer.from(bytes)),
        ),
        (value) => {
          const metadata = new Metadata();
          try {
            if (typeof value === 'string') metadata.set('x-deadline-exceeded-by', value);
            else metadata.set('x-deadline-exceeded-by-bin', value);
          } catch {
            return; // grpc-js refuses the value itself: nothing reaches us
          }
          const typed = fromGrpcStatus({ code: status.DEADLINE_EXCEEDED, details: 'Deadline exceeded', metadata });
          expect(typed).toBeInstanceOf(DeadlineExceededError);
          const expected = typeof value === 'string' && value.length > 0 ? `downstream:${value}` : 'local';
          expect((typed as DeadlineExceededError).whose).toBe(expected);
        },
      ),
    );
  });
});
