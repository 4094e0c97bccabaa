/**
 * The behaviour every GraphQL server's integration must show, through a real listening server, a real HTTP client
 * (undici) and real PostgreSQL work (`@deadline/pg`): one schema, mounted by each harness the way that server's
 * users mount one. The slow fields run `pg_sleep(5)` under a marker comment, so the suite watches each statement on
 * the server (pg_stat_activity) and measures when it is gone.
 */
import { createHash } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import { currentContext } from '@deadline/core';
import { withDeadline } from '@deadline/pg';
import DataLoader from 'dataloader';
import pg from 'pg';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { marker, ServerActivity } from '../../pg/test/support/activity.ts';
import { REQUEST_END_CHANNEL, type RequestLine } from '../../server/src/index.ts';
import type { LogLine } from '../../server/test/harness.ts';
import { DEADLINE_EXCEEDED, deadlineDirectiveTypeDefs } from '../src/index.ts';

export const SERVICE = 'catalog';
/** How long `typical` takes, every time: the time it learns. */
const TYPICAL_MS = 60;
/** The slow fields of `report`: 3 of its 20. */
const SLOW_FIELDS = ['f5', 'f11', 'f17'];
const FIELDS = Array.from({ length: 20 }, (_, i) => `f${i + 1}`);

const typeDefs = `
  ${deadlineDirectiveTypeDefs}
  type Query {
    fast: String
    slow(marker: String!): String
    report(marker: String!): Report
    seen: Seen
    refused: String
    capped(marker: String!): String @deadline(maxMs: 200)
    needy: String @deadline(minMs: 60000)
    typical: String
    items(marker: String!, ids: [Int!]!): [Item]
  }
  type Mutation { place(marker: String!): String }
  type Report { ${FIELDS.map((f) => `${f}: String`).join(' ')} }
  type Seen { inContext: Boolean, remainingMs: Float, traceId: String, hop: String }
  type Item { id: Int, name: String }
`;

/** What each request's GraphQL context holds: its DataLoader (one per request, as DataLoader asks). */
export interface SuiteContext {
  session: number;
  names: DataLoader<{ marker: string; id: number }, string>;
}

/** What a harness mounts: the schema's parts and a context per request. */
export interface SuiteApp {
  typeDefs: string;
  resolvers: Record<string, Record<string, unknown>>;
  context(): Promise<SuiteContext>;
}

export interface GraphQLRunning {
  /** The GraphQL endpoint. */
  url: string;
  /** Every line the app's logger wrote (the harness's pino). */
  logs: LogLine[];
  close(): Promise<void>;
}

export interface GraphQLHarness {
  name: string;
  /**
   * The app's context function runs before the request's deadline starts: Apollo's standalone server calls it before
   * any plugin hook, so the calls it makes are not bounded.
   */
  contextBeforeDeadline?: boolean;

  /** Starts the server: the plugin with `serviceName: SERVICE`, `defaultMs: 2_000`, batched requests allowed. */
  start(app: SuiteApp): Promise<GraphQLRunning>;
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: a GraphQL answer, read field by field
  body: any;
  /** From sending to the whole answer read, in ms. */
  tookMs: number;
}

async function post(url: string, payload: unknown, headers: Record<string, string> = {}, signal?: AbortSignal) {
  const sentAt = performance.now();
  const response = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(payload),
    signal,
  });
  const text = await response.body.text();
  const answer: Answer = {
    status: response.statusCode,
    headers: response.headers,
    text,
    body: text === '' ? undefined : JSON.parse(text),
    tookMs: performance.now() - sentAt,
  };
  return answer;
}

/** The end-of-request lines published while the suite runs. */
function requestLines(): { lines: RequestLine[]; stop(): void } {
  const lines: RequestLine[] = [];
  const listener = (message: unknown) => lines.push(message as RequestLine);
  diagnostics.subscribe(REQUEST_END_CHANNEL, listener);
  return { lines, stop: () => diagnostics.unsubscribe(REQUEST_END_CHANNEL, listener) };
}

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((p / 100) * values.length))] as number;

export function graphqlConformance(harness: GraphQLHarness): void {
  describe(`${harness.name}: GraphQL deadline conformance`, () => {
    let pool: pg.Pool;
    let activity: ServerActivity;
    let server: GraphQLRunning;
    const table = `deadline_graphql_${process.pid}_${harness.name.replace(/\W+/g, '_')}`;
    const published = requestLines();
    let failContext = false;
    let typicalRuns = 0;
    /** The line of the request whose answer came last, by the answer's status (written when it closes). */
    const lineFor = async (from: number) => {
      await expect.poll(() => published.lines.length, { timeout: 10_000 }).toBeGreaterThan(from);
      return published.lines[from] as RequestLine;
    };

    beforeAll(async () => {
      if (!(await requireService(POSTGRES))) return;
      pool = new pg.Pool({
        connectionString: POSTGRES.url,
        max: 12,
        application_name: `deadline-graphql-${process.pid}`,
      });
      await pool.query(`CREATE TABLE IF NOT EXISTS ${table} (marker text PRIMARY KEY)`);
      // The pool's connections open now, not inside the first request's budget.
      await Promise.all(Array.from({ length: 12 }, () => pool.query('SELECT 1')));
      activity = await ServerActivity.open();
      const db = withDeadline(pool, { name: 'catalog-db' });
      // Refuses every query: its margin is more than any budget here (a deadline error that escapes a resolver early).
      const refusing = withDeadline(pool, { name: 'refusing-db', marginMs: 60_000 });
      const sleep = async (m: string) => {
        await db.query(`SELECT pg_sleep(5) /* ${m} */`);
        return 'late';
      };
      const app: SuiteApp = {
        typeDefs,
        resolvers: {
          Query: {
            fast: async () => String((await db.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one),
            slow: (_: unknown, { marker: m }: { marker: string }) => sleep(m),
            report: (_: unknown, { marker: m }: { marker: string }) => ({ marker: m }),
            seen: () => {
              const context = currentContext();
              return {
                inContext: context !== undefined,
                remainingMs: context?.remainingMs(),
                traceId: context?.trace?.traceId,
                hop: context?.hop,
              };
            },
            refused: async () => (await refusing.query('SELECT 1')).rows.length.toString(),
            capped: (_: unknown, { marker: m }: { marker: string }) => sleep(m),
            needy: () => 'ran',
            typical: async () => {
              typicalRuns++;
              await new Promise((resolve) => setTimeout(resolve, TYPICAL_MS));
              return 'done';
            },
            items: (_: unknown, { marker: m, ids }: { marker: string; ids: number[] }) =>
              ids.map((id) => ({ id, marker: m })),
          },
          Item: {
            name: (item: { id: number; marker: string }, _: unknown, context: SuiteContext) =>
              context.names.load({ marker: item.marker, id: item.id }),
          },
          Mutation: {
            place: async (_: unknown, { marker: m }: { marker: string }) => {
              await db.query(`INSERT INTO ${table} (marker) VALUES ($1)`, [m]);
              return sleep(m);
            },
          },
          Report: Object.fromEntries(
            FIELDS.map((f) => [
              f,
              async (report: { marker: string }) =>
                SLOW_FIELDS.includes(f)
                  ? sleep(`${report.marker}_${f}`)
                  : (await db.query<{ f: string }>('SELECT $1::text AS f', [f])).rows[0]?.f,
            ]),
          ),
        },
        context: async () => ({
          // A session lookup the app's context function makes: refused for lack of time when the test says so.
          session: failContext ? (await refusing.query('SELECT 1')).rows.length : 0,
          names: new DataLoader<{ marker: string; id: number }, string>(async (keys) => {
            // One statement for the whole batch, as a batch function does.
            const { rows } = await db.query<{ id: number; name: string }>(
              `SELECT id, 'item ' || id AS name, pg_sleep(5) FROM unnest($1::int[]) AS id /* ${keys[0]?.marker} */`,
              [keys.map((key) => key.id)],
            );
            return keys.map((key) => rows.find((row) => row.id === key.id)?.name ?? new Error(`no item ${key.id}`));
          }),
        }),
      };
      server = await harness.start(app);
    });

    afterAll(async () => {
      published.stop();
      await server?.close();
      await pool?.query(`DROP TABLE IF EXISTS ${table}`);
      await activity?.end();
      await pool?.end();
    });

    /**
     * Nothing the app logged is at error level, and no line about a deadline or a cancellation carries a stack (the
     * servers' own lines about other things, Mercurius's for an unknown persisted query say, are theirs).
     */
    const expectQuietLogs = () => {
      expect(server.logs.filter((line) => line.level >= 50)).toEqual([]);
      const aboutDeadlines = server.logs.filter((line) => /deadline|cancel/i.test(JSON.stringify(line)));
      expect(aboutDeadlines.filter((line) => JSON.stringify(line).includes('\\n    at '))).toEqual([]);
    };

    it('20 fields of which 3 are slow, 400 ms budget: the 17 answered, 3 errors naming the hop, the statements gone', async () => {
      const query = `query Report($m: String!) { report(marker: $m) { ${FIELDS.join(' ')} } }`;
      const answeredMs: number[] = [];
      const goneMs: number[] = [];
      for (let run = 0; run < 3; run++) {
        const m = marker();
        const from = published.lines.length;
        const sentAt = performance.now();
        const answer = await post(server.url, { query, variables: { m } }, { 'x-request-deadline': '400' });
        expect(answer.status).toBe(200);
        expect(answer.headers['x-deadline-exceeded-by']).toBe(SERVICE);
        expect(answer.tookMs).toBeGreaterThanOrEqual(380);
        expect(answer.tookMs).toBeLessThan(3_000);
        const report = answer.body.data.report as Record<string, string | null>;
        for (const f of FIELDS) expect(report[f]).toBe(SLOW_FIELDS.includes(f) ? null : f);
        expect(answer.body.errors).toHaveLength(3);
        for (const error of answer.body.errors) {
          expect(error.extensions).toMatchObject({ code: DEADLINE_EXCEEDED, exceededBy: SERVICE });
          expect(SLOW_FIELDS).toContain(error.path[1]);
        }
        // No internal names, no stack, in the answer.
        expect(answer.text).not.toContain('catalog-db');
        expect(answer.text).not.toContain('pg_sleep');
        expect(answer.text).not.toMatch(/\s+at /);
        const gone = await Promise.all(SLOW_FIELDS.map((f) => activity.goneAt(`${m}_${f}`)));
        // From the deadline (the client's send plus the budget; the server's is a little later) to each statement gone.
        answeredMs.push(answer.tookMs - 400);
        goneMs.push(...gone.map((at) => at - sentAt - 400));
        expect(await lineFor(from)).toMatchObject({
          outcome: 'deadline_exceeded',
          exceededBy: SERVICE,
          statusCode: 200,
        });
      }
      console.log(
        `${harness.name}: 20 fields, 3 slow, 400 ms, 3 runs: answered ${answeredMs.map((ms) => ms.toFixed(1)).join(' / ')} ms after the deadline; the slow statements gone ${goneMs.map((ms) => ms.toFixed(1)).join(' / ')} ms after it`,
      );
      expect(Math.max(...goneMs)).toBeLessThan(1_000);
      expectQuietLogs();
    });

    it('the answer comes at the deadline, whatever is in flight: 5 runs', async () => {
      const late: number[] = [];
      for (let run = 0; run < 5; run++) {
        const m = marker();
        const answer = await post(
          server.url,
          { query: 'query ($m: String!) { fast slow(marker: $m) }', variables: { m } },
          { 'x-request-deadline': '300' },
        );
        expect(answer.body.data).toEqual({ fast: '1', slow: null });
        expect(answer.body.errors).toHaveLength(1);
        late.push(answer.tookMs - 300);
        await activity.goneAt(m);
      }
      console.log(
        `${harness.name}: partial answer after the 300 ms deadline: p50 ${percentile(late, 50).toFixed(1)} ms, max ${Math.max(...late).toFixed(1)} ms (round trip included)`,
      );
    });

    it('a deadline error a resolver ends with early (a query refused for lack of time) is the same field error', async () => {
      const from = published.lines.length;
      const answer = await post(server.url, { query: '{ fast refused }' });
      expect(answer.status).toBe(200);
      expect(answer.body.data).toEqual({ fast: '1', refused: null });
      expect(answer.body.errors).toEqual([
        expect.objectContaining({
          path: ['refused'],
          extensions: expect.objectContaining({ code: DEADLINE_EXCEEDED, exceededBy: SERVICE }),
        }),
      ]);
      expect(answer.body.errors[0].extensions.code).not.toBe('INTERNAL_SERVER_ERROR');
      expect(answer.text).not.toContain('refusing-db');
      expect(answer.text).not.toMatch(/\s+at /);
      expect(answer.headers['x-deadline-exceeded-by']).toBe(SERVICE);
      expect(await lineFor(from)).toMatchObject({ outcome: 'deadline_exceeded', statusCode: 200 });
      expectQuietLogs();
    });

    it("resolvers run inside the request's context: the caller's budget and trace", async () => {
      const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
      const answer = await post(
        server.url,
        { query: '{ seen { inContext remainingMs traceId hop } }' },
        { 'x-request-deadline': '1500', traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
      );
      expect(answer.status).toBe(200);
      const seen = answer.body.data.seen;
      expect(seen).toMatchObject({ inContext: true, traceId, hop: SERVICE });
      expect(seen.remainingMs).toBeLessThanOrEqual(1_500);
      expect(seen.remainingMs).toBeGreaterThan(1_000);
      expect(answer.headers['x-deadline-exceeded-by']).toBeUndefined();
    });

    it('the client gives up: its statement is cancelled on the server, one line, nothing answered', async () => {
      const m = marker();
      const from = published.lines.length;
      const controller = new AbortController();
      const answer = post(
        server.url,
        { query: 'query ($m: String!) { slow(marker: $m) }', variables: { m } },
        {},
        controller.signal,
      );
      answer.catch(() => {});
      await activity.startedRunning(m);
      const leftAt = performance.now();
      controller.abort();
      await expect(answer).rejects.toThrow();
      const goneMs = (await activity.goneAt(m)) - leftAt;
      console.log(`${harness.name}: the client left: its statement gone ${goneMs.toFixed(1)} ms after`);
      expect(goneMs).toBeLessThan(1_000);
      expect(await lineFor(from)).toMatchObject({ outcome: 'cancelled', statusCode: 499 });
      expectQuietLogs();
    });

    it('a field with its own budget (@deadline(maxMs: 200)) is cut at it; the rest of the request goes on', async () => {
      const m = marker();
      const from = published.lines.length;
      const answer = await post(server.url, {
        query: 'query ($m: String!) { fast capped(marker: $m) }',
        variables: { m },
      });
      expect(answer.tookMs).toBeGreaterThanOrEqual(190);
      expect(answer.tookMs).toBeLessThan(1_500);
      expect(answer.body.data).toEqual({ fast: '1', capped: null });
      expect(answer.body.errors[0]).toMatchObject({ path: ['capped'], extensions: { code: DEADLINE_EXCEEDED } });
      await activity.goneAt(m);
      expect(await lineFor(from)).toMatchObject({ outcome: 'deadline_exceeded', statusCode: 200 });
    });

    it('a field that no longer fits its typical time is not started, unless none of it runs (a probe)', async () => {
      // 20 runs teach the field its time (60 ms, every time).
      for (let i = 0; i < 20; i++)
        expect((await post(server.url, { query: '{ typical }' })).body.data.typical).toBe('done');
      const before = typicalRuns;
      const from = published.lines.length;
      // Two of it with 40 ms left: the first runs, as none of the field is running (a probe), and is cut at the
      // deadline; the second has another running and is not started.
      const answer = await post(server.url, { query: '{ a: typical b: typical }' }, { 'x-request-deadline': '40' });
      expect(answer.body.data).toEqual({ a: null, b: null });
      expect(typicalRuns - before).toBe(1);
      const [a, b] = ['a', 'b'].map((alias) => answer.body.errors.find((e: { path: string[] }) => e.path[0] === alias));
      expect(a).toMatchObject({ extensions: { code: DEADLINE_EXCEEDED, exceededBy: SERVICE } });
      expect(a.message).not.toMatch(/^Not started/);
      expect(b).toMatchObject({ extensions: { code: DEADLINE_EXCEEDED, exceededBy: SERVICE } });
      const [, left, needs] = /^Not started: (\d+) ms left, Query\.typical needs (\d+) ms$/.exec(b.message) ?? [];
      expect(Number(left)).toBeLessThan(40);
      // Its fastest typical time (the 10th percentile), to the estimate's 10 % buckets; a loaded machine's timers
      // fire late, never early.
      expect(Number(needs)).toBeGreaterThanOrEqual(54);
      expect(Number(needs)).toBeLessThan(120);
      // The request is the hop's deadline, logged once as such, with no stack and nothing at error level.
      expect(answer.headers['x-deadline-exceeded-by']).toBe(SERVICE);
      expect(await lineFor(from)).toMatchObject({ outcome: 'deadline_exceeded', statusCode: 200 });
      expectQuietLogs();
      // With time enough it runs again.
      expect((await post(server.url, { query: '{ typical }' })).body.data.typical).toBe('done');
    });

    it('a field that needs more time than is left (@deadline(minMs)) is not started', async () => {
      const answer = await post(server.url, { query: '{ fast needy }' });
      expect(answer.body.data).toEqual({ fast: '1', needy: null });
      expect(answer.body.errors[0]).toMatchObject({ path: ['needy'], extensions: { code: DEADLINE_EXCEEDED } });
      expect(answer.body.errors[0].message).toMatch(/^Not started: \d+ ms left, Query\.needy needs 60000 ms$/);
    });

    it('a DataLoader batch is cut at the deadline, and its statement cancelled', async () => {
      const m = marker();
      const answer = await post(
        server.url,
        { query: 'query ($m: String!) { fast items(marker: $m, ids: [1, 2, 3]) { id name } }', variables: { m } },
        { 'x-request-deadline': '400' },
      );
      const answeredAt = performance.now();
      expect(answer.status).toBe(200);
      expect(answer.body.data).toEqual({
        fast: '1',
        items: [1, 2, 3].map((id) => ({ id, name: null })),
      });
      expect(answer.body.errors).toHaveLength(3);
      for (const error of answer.body.errors) expect(error.extensions.code).toBe(DEADLINE_EXCEEDED);
      const goneMs = (await activity.goneAt(m)) - answeredAt;
      console.log(
        `${harness.name}: the DataLoader batch's statement gone ${Math.max(0, goneMs).toFixed(1)} ms after the answer`,
      );
      expect(goneMs).toBeLessThan(1_000);
    });

    it('a mutation cut after its side effect: the error says so, the row is there', async () => {
      const m = marker();
      const answer = await post(
        server.url,
        { query: 'mutation ($m: String!) { place(marker: $m) }', variables: { m } },
        { 'x-request-deadline': '400' },
      );
      expect(answer.body.data).toEqual({ place: null });
      expect(answer.body.errors[0]).toMatchObject({ path: ['place'], extensions: { code: DEADLINE_EXCEEDED } });
      await activity.goneAt(m);
      const { rows } = await pool.query(`SELECT marker FROM ${table} WHERE marker = $1`, [m]);
      expect(rows).toHaveLength(1);
    });

    it('batched operations: each its own answer under the one budget', async () => {
      const m = marker();
      const answer = await post(
        server.url,
        [{ query: '{ fast }' }, { query: 'query ($m: String!) { fast slow(marker: $m) }', variables: { m } }],
        { 'x-request-deadline': '400' },
      );
      expect(answer.status).toBe(200);
      expect(answer.body).toHaveLength(2);
      expect(answer.body[0]).toEqual({ data: { fast: '1' } });
      expect(answer.body[1].data).toEqual({ fast: '1', slow: null });
      expect(answer.body[1].errors[0].extensions.code).toBe(DEADLINE_EXCEEDED);
      await activity.goneAt(m);
    });

    it('a persisted query (its hash alone) runs under the deadline as the full text does', async () => {
      const m = marker();
      const query = 'query Persisted($m: String!) { fast slow(marker: $m) }';
      const sha256Hash = createHash('sha256').update(query).digest('hex');
      const extensions = { persistedQuery: { version: 1, sha256Hash } };
      const first = await post(server.url, { extensions, variables: { m: 'unused' } });
      expect(JSON.stringify(first.body.errors)).toMatch(/persisted_?query_?not_?found/i);
      const registered = await post(
        server.url,
        { query, extensions, variables: { m: `${m}_first` } },
        { 'x-request-deadline': '300' },
      );
      expect(registered.body.data).toEqual({ fast: '1', slow: null });
      const answer = await post(server.url, { extensions, variables: { m } }, { 'x-request-deadline': '300' });
      expect(answer.body.data).toEqual({ fast: '1', slow: null });
      expect(answer.body.errors[0].extensions.code).toBe(DEADLINE_EXCEEDED);
      await Promise.all([activity.goneAt(`${m}_first`), activity.goneAt(m)]);
    });

    it.skipIf(harness.contextBeforeDeadline === true)(
      "the app's context function fails with a deadline error (a lookup refused for lack of time): 504 GraphQL-shaped",
      async () => {
        failContext = true;
        try {
          const from = published.lines.length;
          const answer = await post(server.url, { query: '{ fast }' });
          expect(answer.status).toBe(504);
          expect(answer.headers['x-deadline-exceeded-by']).toBe(SERVICE);
          expect(answer.body.errors[0].extensions).toMatchObject({ code: DEADLINE_EXCEEDED, exceededBy: SERVICE });
          expect(answer.text).not.toContain('refusing-db');
          expect(answer.text).not.toMatch(/\s+at /);
          expect(await lineFor(from)).toMatchObject({ outcome: 'deadline_exceeded', statusCode: 504 });
          expectQuietLogs();
        } finally {
          failContext = false;
        }
      },
    );

    it('a budget below the minimum: nothing runs, 504 GraphQL-shaped, naming the hop', async () => {
      const from = published.lines.length;
      const answer = await post(server.url, { query: '{ fast }' }, { 'x-request-deadline': '3' });
      expect(answer.status).toBe(504);
      expect(answer.headers['x-deadline-exceeded-by']).toBe(SERVICE);
      expect(answer.body.data).toBeUndefined();
      expect(answer.body.errors).toEqual([
        expect.objectContaining({ extensions: { code: DEADLINE_EXCEEDED, exceededBy: SERVICE } }),
      ]);
      expect(await lineFor(from)).toMatchObject({ outcome: 'deadline_exceeded', statusCode: 504 });
    });
  });
}
