import { describe, expect, it } from 'vitest';
import {
  CancelledError,
  DeadlineError,
  DeadlineExceededError,
  ErrorCode,
  findDeadlineError,
  InvalidArgumentError,
  isCancelledError,
  isDeadlineError,
  isDeadlineExceededError,
} from '../src/index.ts';
import { markCausedBy, recognizeErrors } from '../src/internal.ts';

describe('errors', () => {
  it('carry stable codes and their details', () => {
    const cause = new Error('socket closed');
    const err = new DeadlineExceededError({
      budgetMs: 800.4,
      elapsedMs: 812.6,
      phase: 'during-call',
      target: 'GET http://inventory',
      whose: 'downstream:inventory',
      cause,
    });
    expect(err).toBeInstanceOf(Error);
    expect(err).toBeInstanceOf(DeadlineError);
    expect(err.name).toBe('DeadlineExceededError');
    expect(err.code).toBe(ErrorCode.DeadlineExceeded);
    expect(err.code).toBe('ERR_DEADLINE_EXCEEDED');
    expect(err).toMatchObject({ budgetMs: 800, elapsedMs: 813, phase: 'during-call', whose: 'downstream:inventory' });
    expect(err.cause).toBe(cause);
    expect(err.message).toBe(
      'call to GET http://inventory cut off (the deadline of inventory) after 813 ms of a 800 ms budget',
    );
    expect(new DeadlineExceededError({ phase: 'in-handler' }).message).toBe('deadline exceeded');
    expect(new DeadlineExceededError({ phase: 'in-handler' })).not.toHaveProperty('cause');
  });

  it('carry the HTTP status and the header that frameworks’ default error handlers apply', () => {
    const local = new DeadlineExceededError({ phase: 'in-handler', hop: 'orders' });
    expect(local.statusCode).toBe(504);
    expect(local.hop).toBe('orders');
    expect(local.headers).toEqual({ 'x-deadline-exceeded-by': 'orders' });
    const downstream = new DeadlineExceededError({
      phase: 'during-call',
      whose: 'downstream:inventory',
      hop: 'orders',
    });
    expect(downstream.hop).toBe('inventory');
    expect(downstream.headers).toEqual({ 'x-deadline-exceeded-by': 'inventory' });
    expect(new DeadlineExceededError({ phase: 'in-handler' }).headers).toBeUndefined();
    expect(new CancelledError().statusCode).toBe(499);
    expect(new InvalidArgumentError('x', 'y', 1).statusCode).toBe(500);
    // Getters on the prototype: they do not clutter serialized log lines.
    expect(Object.keys(local)).not.toContain('statusCode');
  });

  it('keep cancellation apart from deadlines', () => {
    const err = new CancelledError('client closed the connection', { reason: 'client-disconnected' });
    expect(err.code).toBe('ERR_CANCELLED');
    expect(err.reason).toBe('client-disconnected');
    expect(new CancelledError().reason).toBe('cancelled');
    expect(err).not.toBeInstanceOf(DeadlineExceededError);
    expect(isDeadlineExceededError(err)).toBe(false);
    expect(isCancelledError(err)).toBe(true);
  });

  it('name the option and the value received', () => {
    const err = new InvalidArgumentError('maxMs', 'a number ≥ 1', -5);
    expect(err.code).toBe('ERR_INVALID_ARGUMENT');
    expect(err.option).toBe('maxMs');
    expect(err.message).toBe('maxMs must be a number ≥ 1; received -5');
    expect(new InvalidArgumentError('x', 'y', 'a'.repeat(500)).message.length).toBeLessThan(100);
  });

  it('answer instanceof across two copies of the package', async () => {
    const copy = (await import('../src/errors.ts?copy=2')) as typeof import('../src/errors.ts');
    expect(copy.DeadlineExceededError).not.toBe(DeadlineExceededError);
    const foreign = new copy.DeadlineExceededError({ phase: 'before-call' });
    expect(foreign).toBeInstanceOf(DeadlineExceededError);
    expect(foreign).toBeInstanceOf(DeadlineError);
    expect(foreign).not.toBeInstanceOf(CancelledError);
    expect(new CancelledError()).toBeInstanceOf(copy.CancelledError);
    expect(new CancelledError()).not.toBeInstanceOf(copy.InvalidArgumentError);
    expect(isDeadlineError(foreign)).toBe(true);
    expect(isDeadlineExceededError(foreign)).toBe(true);
    expect(new Error('x')).not.toBeInstanceOf(DeadlineError);
    expect(null).not.toBeInstanceOf(DeadlineError);
  });

  it('cannot be minted from the abstract base', () => {
    const Base = DeadlineError as unknown as new (code: string, message: string) => Error;
    expect(() => new Base('ERR_CANCELLED', 'forged')).toThrow(/abstract/);
  });

  it('leave user subclasses with the ordinary instanceof', () => {
    class MyTimeout extends DeadlineExceededError {}
    const mine = new MyTimeout({ phase: 'in-handler' });
    expect(mine).toBeInstanceOf(MyTimeout);
    expect(mine).toBeInstanceOf(DeadlineExceededError);
    expect(new DeadlineExceededError({ phase: 'in-handler' })).not.toBeInstanceOf(MyTimeout);
  });
});

describe('guards recognise what means the same', () => {
  const ours = new DeadlineExceededError({ phase: 'during-call' });

  it('an AbortError caused by our reason (fetch, http.request)', () => {
    const abort = new DOMException('This operation was aborted', 'AbortError');
    Object.defineProperty(abort, 'cause', { value: ours });
    expect(isDeadlineExceededError(abort)).toBe(true);
    const nodeAbort = Object.assign(new Error('The operation was aborted'), { name: 'AbortError', code: 'ABORT_ERR' });
    expect(isDeadlineExceededError(nodeAbort)).toBe(false);
    expect(isDeadlineExceededError(new Error('wrapped', { cause: nodeAbort }))).toBe(false);
    const cancelled = new Error('aborted', { cause: new CancelledError() });
    expect(isCancelledError(cancelled)).toBe(true);
    expect(isDeadlineExceededError(cancelled)).toBe(false);
  });

  it('what a driver registers: its wrapper fields and its server-side timeouts; nothing before it does', () => {
    // The shape of a driver this test makes up: a timeout with code 'TEST_TIMEOUT', wrapped in `inner`.
    const timeout = Object.assign(new Error('the server stopped the statement'), { code: 'TEST_TIMEOUT' });
    const wrapped = Object.assign(new Error('OrmError'), { inner: ours });
    expect(isDeadlineExceededError(timeout)).toBe(false);
    expect(isDeadlineExceededError(wrapped)).toBe(false);
    recognizeErrors('test-driver', {
      wrapperFields: ['inner'],
      isServerTimeout: (err) => err.code === 'TEST_TIMEOUT',
    });
    expect(isDeadlineExceededError(timeout)).toBe(true);
    expect(isDeadlineExceededError(new Error('fetch failed', { cause: timeout }))).toBe(true);
    expect(findDeadlineError(wrapped)).toBe(ours);
    const killed = Object.assign(new Error('interrupted'), { code: 'TEST_KILLED' });
    expect(isDeadlineExceededError(killed)).toBe(false);
    markCausedBy(killed, ours);
    expect(isDeadlineExceededError(killed)).toBe(true);
    // Registering again under the same name replaces, never duplicates (two copies of a driver's package).
    recognizeErrors('test-driver', { wrapperFields: ['inner'] });
    expect(isDeadlineExceededError(timeout)).toBe(false);
    recognizeErrors('test-driver', {});
    expect(findDeadlineError(wrapped)).toBeUndefined();
  });

  it('an error rebuilt from ours, or wrapping it and copying its code', () => {
    // Rebuilt with our code and message only (Prisma's PrismaClientKnownRequestError): recognised by the code.
    const prisma = Object.assign(new Error('call to db cut off after 301 ms of a 300 ms budget'), {
      code: 'ERR_DEADLINE_EXCEEDED',
      clientVersion: '7.10.0',
    });
    expect(isDeadlineExceededError(prisma)).toBe(true);
    expect(findDeadlineError(prisma)).toMatchObject({ code: 'ERR_DEADLINE_EXCEEDED', cause: prisma });
    expect(findDeadlineError(prisma)?.message).toBe(prisma.message);
    const left = Object.assign(new Error('client went away'), { code: 'ERR_CANCELLED' });
    expect(isCancelledError(left)).toBe(true);
    expect(isDeadlineExceededError(left)).toBe(false);
    expect(findDeadlineError(left)).toBeInstanceOf(CancelledError);
    // A wrapper that copies the code and keeps the error (got's RequestError): the error itself, not a copy.
    const downstream = new DeadlineExceededError({ phase: 'during-call', whose: 'downstream:inventory' });
    const got = Object.assign(new Error('got'), { code: 'ERR_DEADLINE_EXCEEDED', cause: downstream });
    expect(findDeadlineError(got)).toBe(downstream);
  });

  it('findDeadlineError returns the typed error to answer with', () => {
    const abort = new Error('aborted', { cause: ours });
    expect(findDeadlineError(abort)).toBe(ours);
    const cancelled = new CancelledError();
    expect(findDeadlineError(new Error('x', { cause: cancelled }))).toBe(cancelled);
    const killed = Object.assign(new Error('Query execution was interrupted'), { errno: 1317 });
    markCausedBy(killed, ours);
    expect(findDeadlineError(killed)).toBe(ours);
    expect(findDeadlineError(new Error('unrelated'))).toBeUndefined();
    expect(findDeadlineError(undefined)).toBeUndefined();
  });

  it('never loops on a cyclic cause chain and never throws on odd input', () => {
    const a: { cause?: unknown } = {};
    const b = { cause: a };
    a.cause = b;
    expect(isDeadlineExceededError(a)).toBe(false);
    expect(isCancelledError(a)).toBe(false);
    for (const odd of [undefined, null, 0, 'ERR_DEADLINE_EXCEEDED', Symbol('x'), () => 1]) {
      expect(isDeadlineExceededError(odd)).toBe(false);
      expect(isCancelledError(odd)).toBe(false);
      expect(isDeadlineError(odd)).toBe(false);
    }
    markCausedBy(Object.freeze(new Error('frozen')), ours); // no throw
    markCausedBy(null, ours);
  });
});
