/**
 * The belt's SQL, for both flavours (no server needed: MySQL is not available here, so its hint is checked as
 * text), and option checks.
 */
import { InvalidArgumentError } from '@deadline/core';
import { createPool } from 'mysql2/promise';
import { describe, expect, it } from 'vitest';
import { BELT_SLACK_MS, beltSql, sessionBelt } from '../src/belt.ts';
import { flavourOf } from '../src/flavour.ts';
import { withDeadline } from '../src/index.ts';

const ms = 200 - BELT_SLACK_MS; // so the limit written is 200 ms

describe('MariaDB: SET STATEMENT max_statement_time … FOR', () => {
  it.each([
    'SELECT 1',
    'select * from t',
    'INSERT INTO t VALUES (1)',
    'UPDATE t SET a = 1',
    'DELETE FROM t',
    'REPLACE INTO t VALUES (1)',
    'WITH x AS (SELECT 1) SELECT * FROM x',
    '(SELECT 1) UNION (SELECT 2)',
    '  /* a comment */ SELECT 1',
    '-- a comment\nSELECT 1',
  ])('bounds %j', (sql) => {
    expect(beltSql('mariadb', sql, ms)).toBe(`SET STATEMENT max_statement_time=0.200 FOR ${sql}`);
  });

  it.each([
    'SET @a = 1',
    'SET STATEMENT max_statement_time=1 FOR SELECT 1',
    'USE test',
    'CALL proc()',
    'LOCK TABLES t WRITE',
    'START TRANSACTION',
    '/*!40101 SET NAMES utf8 */',
    'SELECTED',
  ])('leaves %j as it is', (sql) => {
    expect(beltSql('mariadb', sql, ms)).toBe(sql);
  });

  it('never writes 0, which would mean "no limit"', () => {
    expect(beltSql('mariadb', 'SELECT 1', -1_000)).toBe('SET STATEMENT max_statement_time=0.001 FOR SELECT 1');
  });
});

describe('MySQL: the MAX_EXECUTION_TIME hint, on SELECT only', () => {
  it('after the SELECT keyword', () => {
    expect(beltSql('mysql', 'SELECT * FROM t', ms)).toBe('SELECT /*+ MAX_EXECUTION_TIME(200) */ * FROM t');
    expect(beltSql('mysql', '/* c */ select 1', ms)).toBe('/* c */ select /*+ MAX_EXECUTION_TIME(200) */ 1');
  });

  it("joins the caller's hint comment, unless it already sets a limit", () => {
    expect(beltSql('mysql', 'SELECT /*+ BKA(t) */ * FROM t', ms)).toBe(
      'SELECT /*+ MAX_EXECUTION_TIME(200) BKA(t) */ * FROM t',
    );
    const own = 'SELECT /*+ MAX_EXECUTION_TIME(50) */ * FROM t';
    expect(beltSql('mysql', own, ms)).toBe(own);
  });

  it.each(['UPDATE t SET a = 1', 'INSERT INTO t SELECT * FROM u', 'WITH x AS (SELECT 1) SELECT * FROM x'])(
    'leaves %j as it is',
    (sql) => {
      expect(beltSql('mysql', sql, ms)).toBe(sql);
    },
  );
});

describe('the session belt for execute()', () => {
  it('saves, sets and restores the session variable of each flavour', () => {
    expect(sessionBelt('mariadb', ms)).toEqual({
      set: 'SET @deadline_saved_limit = @@session.max_statement_time, @@session.max_statement_time = 0.200',
      restore: 'SET @@session.max_statement_time = @deadline_saved_limit, @deadline_saved_limit = NULL',
    });
    expect(sessionBelt('mysql', ms)).toEqual({
      set: 'SET @deadline_saved_limit = @@session.max_execution_time, @@session.max_execution_time = 200',
      restore: 'SET @@session.max_execution_time = @deadline_saved_limit, @deadline_saved_limit = NULL',
    });
  });
});

describe('the flavour', () => {
  it('is MariaDB when the version says so, MySQL otherwise', () => {
    expect(flavourOf('5.5.5-10.11.6-MariaDB-0+deb12u1')).toBe('mariadb');
    expect(flavourOf('8.0.36')).toBe('mysql');
  });
});

describe('withDeadline() options, checked at once', () => {
  // A pool connects only when first used: none of these reaches a server.
  const pool = createPool({ host: '127.0.0.1', database: 'orders' });

  it.each([
    [{ name: '' }, 'name'],
    [{ name: 'a\nb' }, 'name'],
    [{ marginMs: -1 }, 'marginMs'],
    [{ marginMs: Number.NaN }, 'marginMs'],
    [{ minMs: '5' }, 'minMs'],
    ['fast', 'options'],
  ])('%j → InvalidArgumentError naming %s', (options, option) => {
    const error = (() => {
      try {
        withDeadline(pool, options as never);
      } catch (caught) {
        return caught;
      }
    })();
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ option });
  });

  it('refuses what is not a mysql2/promise pool or connection', () => {
    for (const value of [undefined, null, {}, pool.pool, 'mysql://db']) {
      expect(() => withDeadline(value as never)).toThrow(InvalidArgumentError);
    }
  });

  it('accepts valid options; the pool is the one given', () => {
    const db = withDeadline(pool, { name: 'orders-db', marginMs: 20, minMs: 5 });
    expect(db.pool).toBe(pool);
  });
});
