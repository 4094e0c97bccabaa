/**
 * The demo's own tables, created when orders starts. `CREATE TABLE IF NOT EXISTS` is not atomic across sessions:
 * two orders processes starting at once on a database without the table (the overload benchmark starts its two
 * chains together) race, and the loser fails on the catalog's unique index (23505) or with duplicate_table
 * (42P07). Either way the table is there.
 */
import type pg from 'pg';

/**
 * Runs `ddl` (a `CREATE TABLE IF NOT EXISTS`, an `ALTER TABLE … IF NOT EXISTS`); another process having made the
 * table at the same moment is fine.
 */
export async function ensureTable(pool: pg.Pool, ddl: string): Promise<void> {
  try {
    await pool.query(ddl);
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (code !== '23505' && code !== '42P07') throw error;
  }
}
