/**
 * What loading `@deadline/pg` teaches the core's guards: PostgreSQL's statement timeout is a deadline, and the
 * ORMs that run on pg keep the driver's error in fields of their own. No server needed: the errors' shapes.
 */
import {
  CancelledError,
  DeadlineExceededError,
  findDeadlineError,
  isCancelledError,
  isDeadlineExceededError,
  runWithContext,
} from '@deadline/core';
import { markCausedBy } from '@deadline/core/internal';
import { describe, expect, it } from 'vitest';
import '../src/index.ts';

describe('the guards, with @deadline/pg loaded', () => {
  const ours = new DeadlineExceededError({ phase: 'during-call' });

  it('PostgreSQL 57014 when we caused it or it was a statement timeout', () => {
    const userCancel = Object.assign(new Error('canceling statement due to user request'), { code: '57014' });
    expect(isDeadlineExceededError(userCancel)).toBe(false);
    markCausedBy(userCancel, ours);
    expect(isDeadlineExceededError(userCancel)).toBe(true);
    expect(isCancelledError(userCancel)).toBe(false);
    // The same driver error when the client left: a cancellation, not a deadline.
    const clientGone = Object.assign(new Error('canceling statement due to user request'), { code: '57014' });
    markCausedBy(clientGone, new CancelledError('client gone', { reason: 'client-disconnected' }));
    expect(isCancelledError(clientGone)).toBe(true);
    expect(isDeadlineExceededError(clientGone)).toBe(false);
    const belt = Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
    expect(isDeadlineExceededError(belt)).toBe(true);
    expect(isDeadlineExceededError(Object.assign(new Error('x'), { code: '23505' }))).toBe(false);
  });

  it("through an ORM's wrapping: TypeORM's driverError, Sequelize's parent and original, MikroORM's previous", () => {
    // The shapes these ORMs give their errors: the driver's error (ours, when we stopped it) kept in a field.
    const typeorm = Object.assign(new Error('QueryFailedError'), { query: 'SELECT 1', driverError: ours });
    const sequelize = Object.assign(new Error('DatabaseError'), { parent: ours, original: ours, sql: 'SELECT 1' });
    const mikro = Object.assign(new Error('DriverException'), { previous: ours });
    for (const wrapped of [typeorm, sequelize, mikro]) {
      expect(isDeadlineExceededError(wrapped)).toBe(true);
      expect(findDeadlineError(wrapped)).toBe(ours);
    }
    // Wrapping a driver error that is not about us: still not a deadline.
    const unique = Object.assign(new Error('duplicate key'), { code: '23505' });
    expect(isDeadlineExceededError(Object.assign(new Error('QueryFailedError'), { driverError: unique }))).toBe(false);
    expect(isDeadlineExceededError(Object.assign(new Error('x'), { parent: 'not an error' }))).toBe(false);
  });

  it('findDeadlineError answers a statement timeout with a DeadlineExceededError of the context', () => {
    const belt = Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
    const wrapped = runWithContext({ deadline: 500, hop: 'orders' }, () => findDeadlineError(belt));
    expect(wrapped).toBeInstanceOf(DeadlineExceededError);
    expect(wrapped).toMatchObject({ phase: 'during-call', hop: 'orders', budgetMs: 500, cause: belt });
  });
});
