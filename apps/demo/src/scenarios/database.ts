/**
 * 5. The database stops. A 5 s query under a 300 ms budget: with the library the server's backend is idle within
 * milliseconds of the deadline (cancelled on the server); with only a client-side timeout the caller gives up at
 * 300 ms but the backend works on for the full 5 s — dead work nobody will read.
 */
import { runWithDeadline } from '@deadline/core';
import { withDeadline as withMysql } from '@deadline/mysql';
import { withDeadline as withPg } from '@deadline/pg';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { until } from '../client.js';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';

const BUDGET_MS = 300;

export async function databaseStops(ctx: ScenarioContext): Promise<ScenarioTable> {
  const sleepS = ctx.quick ? 2 : 5;
  const rows: ScenarioTable['rows'] = [];
  const marker = () => `deadline_demo_${process.pid}_${Math.random().toString(36).slice(2)}`;
  const pgBusy = (m: string) => async () =>
    (
      (
        await ctx.env.monitor.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()",
          [`%${m}%`],
        )
      ).rows[0] as { n: number }
    ).n > 0;

  // PostgreSQL, with the library.
  {
    const m = marker();
    const db = withPg(ctx.env.pool);
    const started = performance.now();
    await runWithDeadline(BUDGET_MS, () => db.query(`SELECT pg_sleep(${sleepS}) /* ${m} */`)).catch(() => {});
    const gaveUp = performance.now();
    await until(async () => !(await pgBusy(m)()), sleepS * 1000 + 2_000);
    rows.push([
      'PostgreSQL',
      '@deadline/pg',
      Math.round(gaveUp - started),
      Math.round(performance.now() - gaveUp),
      'cancelled on the server',
    ]);
  }
  // PostgreSQL, client-side timeout only (pg's query_timeout).
  {
    const m = marker();
    const client = new pg.Client({ connectionString: ctx.env.postgresUrl, query_timeout: BUDGET_MS });
    await client.connect();
    const started = performance.now();
    await client.query(`SELECT pg_sleep(${sleepS}) /* ${m} */`).catch(() => {});
    const gaveUp = performance.now();
    await until(async () => !(await pgBusy(m)()), sleepS * 1000 + 2_000);
    rows.push([
      'PostgreSQL',
      'pg, query_timeout only',
      Math.round(gaveUp - started),
      Math.round(performance.now() - gaveUp),
      'ran to the end',
    ]);
    await client.end().catch(() => {});
  }
  if (ctx.env.mysqlUrl !== undefined) {
    const pool = mysql.createPool({ uri: ctx.env.mysqlUrl, connectionLimit: 3 });
    const watcher = mysql.createPool({ uri: ctx.env.mysqlUrl, connectionLimit: 1 });
    const myBusy = (m: string) => async () => {
      const [found] = await watcher.query(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE INFO LIKE ? AND INFO NOT LIKE '%PROCESSLIST%'",
        [`%${m}%`],
      );
      return Number((found as { n: number }[])[0]?.n) > 0;
    };
    try {
      {
        const m = marker();
        const db = withMysql(pool);
        const started = performance.now();
        await runWithDeadline(BUDGET_MS, () => db.query(`SELECT SLEEP(${sleepS}) /* ${m} */`)).catch(() => {});
        const gaveUp = performance.now();
        await until(async () => !(await myBusy(m)()), sleepS * 1000 + 2_000);
        rows.push([
          'MariaDB',
          '@deadline/mysql',
          Math.round(gaveUp - started),
          Math.round(performance.now() - gaveUp),
          'KILL QUERY',
        ]);
      }
      {
        const m = marker();
        const started = performance.now();
        await pool.query({ sql: `SELECT SLEEP(${sleepS}) /* ${m} */`, timeout: BUDGET_MS }).catch(() => {});
        const gaveUp = performance.now();
        await until(async () => !(await myBusy(m)()), sleepS * 1000 + 2_000);
        rows.push([
          'MariaDB',
          'mysql2, timeout only',
          Math.round(gaveUp - started),
          Math.round(performance.now() - gaveUp),
          'ran to the end',
        ]);
      }
    } finally {
      await pool.end().catch(() => {});
      await watcher.end().catch(() => {});
    }
  } else {
    rows.push(['MariaDB', ctx.env.mysqlMissing ?? 'skipped', null, null, 'skipped']);
  }
  return {
    id: 5,
    title: `The database stops: a ${sleepS} s query under a ${BUDGET_MS} ms budget`,
    columns: ['database', 'client', 'caller gave up after (ms)', 'server busy after that (ms)', 'the statement'],
    rows,
    note: 'Server busy: until the statement left pg_stat_activity / the process list — dead work, in milliseconds.',
  };
}
