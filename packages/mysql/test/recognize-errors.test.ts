/**
 * What loading `@deadline/mysql` teaches the core's guards: MySQL's and MariaDB's statement timeouts are
 * deadlines, an operator's KILL QUERY is not. No server needed: the errors' shapes.
 */
import { DeadlineExceededError, findDeadlineError, isDeadlineExceededError } from '@deadline/core';
import { markCausedBy } from '@deadline/core/internal';
import { describe, expect, it } from 'vitest';
import '../src/index.ts';

describe('the guards, with @deadline/mysql loaded', () => {
  const ours = new DeadlineExceededError({ phase: 'during-call' });

  it('MySQL / MariaDB statement timeouts (1969, 3024), and 1317 when our KILL QUERY caused it', () => {
    for (const errno of [1969, 3024]) {
      expect(isDeadlineExceededError(Object.assign(new Error('timeout'), { errno }))).toBe(true);
    }
    const killed = Object.assign(new Error('Query execution was interrupted'), { errno: 1317 });
    expect(isDeadlineExceededError(killed)).toBe(false); // an operator's KILL QUERY
    markCausedBy(killed, ours);
    expect(isDeadlineExceededError(killed)).toBe(true);
    expect(isDeadlineExceededError(Object.assign(new Error('dup'), { errno: 1062 }))).toBe(false);
  });

  it("through an ORM's wrapping: TypeORM's driverError, Sequelize's parent, MikroORM's previous", () => {
    const typeorm = Object.assign(new Error('QueryFailedError'), { driverError: ours });
    const sequelize = Object.assign(new Error('DatabaseError'), { parent: ours, original: ours });
    const mikro = Object.assign(new Error('DriverException'), { previous: ours });
    for (const wrapped of [typeorm, sequelize, mikro]) expect(findDeadlineError(wrapped)).toBe(ours);
  });
});
