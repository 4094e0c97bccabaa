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

/** One way of running the slow statement: how to run it (tagged with `marker`), and how to see it on the server. */
interface Way {
  database: string;
  client: string;
  /** What happens to the statement, as the row says it. */
  statement: string;
  run(marker: string): Promise<unknown>;
  busy(marker: string): Promise<boolean>;
}

/** Runs it; measures when the caller gave up, then how long the server went on with it. */
async function measure(way: Way, sleepS: number): Promise<ScenarioTable['rows'][number]> {
  const marker = `deadline_demo_${process.pid}_${Math.random().toString(36).slice(2)}`;
  const started = performance.now();
  await way.run(marker).catch(() => {});
  const gaveUp = performance.now();
  await until(async () => !(await way.busy(marker)), sleepS * 1000 + 2_000);
  return [
    way.database,
    way.client,
    Math.round(gaveUp - started),
    Math.round(performance.now() - gaveUp),
    way.statement,
  ];
}

export async function databaseStops(ctx: ScenarioContext): Promise<ScenarioTable> {
  const sleepS = ctx.quick ? 2 : 5;
  const rows: ScenarioTable['rows'] = [];
  const pgBusy = async (marker: string) => {
    const { rows: found } = await ctx.env.monitor.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()",
      [`%${marker}%`],
    );
    return (found[0] as { n: number }).n > 0;
  };
  const db = withPg(ctx.env.pool);
  rows.push(
    await measure(
      {
        database: 'PostgreSQL',
        client: '@deadline/pg',
        statement: 'cancelled on the server',
        run: (m) => runWithDeadline(BUDGET_MS, () => db.query(`SELECT pg_sleep(${sleepS}) /* ${m} */`)),
        busy: pgBusy,
      },
      sleepS,
    ),
  );
  // pg's own query_timeout: the promise rejects on time, nothing is said to the server.
  const client = new pg.Client({ connectionString: ctx.env.postgresUrl, query_timeout: BUDGET_MS });
  await client.connect();
  try {
    rows.push(
      await measure(
        {
          database: 'PostgreSQL',
          client: 'pg, query_timeout only',
          statement: 'ran to the end',
          run: (m) => client.query(`SELECT pg_sleep(${sleepS}) /* ${m} */`),
          busy: pgBusy,
        },
        sleepS,
      ),
    );
  } finally {
    await client.end().catch(() => {});
  }
  if (ctx.env.mysqlUrl === undefined) {
    rows.push(['MariaDB', ctx.env.mysqlMissing ?? 'skipped', null, null, 'skipped']);
  } else {
    const pool = mysql.createPool({ uri: ctx.env.mysqlUrl, connectionLimit: 3 });
    const watcher = mysql.createPool({ uri: ctx.env.mysqlUrl, connectionLimit: 1 });
    const myBusy = async (marker: string) => {
      const [found] = await watcher.query(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE INFO LIKE ? AND INFO NOT LIKE '%PROCESSLIST%'",
        [`%${marker}%`],
      );
      return Number((found as { n: number }[])[0]?.n) > 0;
    };
    const bounded = withMysql(pool);
    try {
      rows.push(
        await measure(
          {
            database: 'MariaDB',
            client: '@deadline/mysql',
            statement: 'KILL QUERY',
            run: (m) => runWithDeadline(BUDGET_MS, () => bounded.query(`SELECT SLEEP(${sleepS}) /* ${m} */`)),
            busy: myBusy,
          },
          sleepS,
        ),
      );
      // mysql2's own timeout: the promise rejects on time, the statement runs on.
      rows.push(
        await measure(
          {
            database: 'MariaDB',
            client: 'mysql2, timeout only',
            statement: 'ran to the end',
            run: (m) => pool.query({ sql: `SELECT SLEEP(${sleepS}) /* ${m} */`, timeout: BUDGET_MS }),
            busy: myBusy,
          },
          sleepS,
        ),
      );
    } finally {
      await pool.end().catch(() => {});
      await watcher.end().catch(() => {});
    }
  }
  return {
    id: 5,
    title: `The database stops: a ${sleepS} s query under a ${BUDGET_MS} ms budget`,
    columns: ['database', 'client', 'caller gave up after (ms)', 'server busy after that (ms)', 'the statement'],
    rows,
    note: 'Server busy: until the statement left pg_stat_activity / the process list — dead work, in milliseconds.',
  };
}
