/**
 * An app shaped like fastify's demo application adopts the plugin as the guides say (fixtures/demo-app): knex on
 * mysql2 with `instrumentMysql()`, `@fastify/autoload` loading `@fastify/cors` and a plugin that adds a route before
 * the deadline plugin, and a catch-all error handler of the app's own that logs at error level and answers 500. It
 * runs as its own process, as a real one would: autoload imports each file itself, outside vitest, so the process
 * loads the packages from their TypeScript sources through test/support/source-hooks.mjs. Its pino lines (stdout)
 * are kept here.
 *
 * A client that leaves mid-query and a request that runs out of its budget each end in the plugin's one line: the
 * catch-all never sees them, nothing is logged at error level, and the statement is gone from the server.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MARIADB, requireService } from '../../../test/support/services.ts';
import { marker, Watcher } from '../../mysql/test/support.ts';
import { type LogLine, repeatedMessages } from '../../server/test/harness.ts';

const available = await requireService(MARIADB);

const sourceHooks = fileURLToPath(new URL('../../../test/support/source-hooks.mjs', import.meta.url));
const server = fileURLToPath(new URL('./fixtures/demo-app/server.js', import.meta.url));

/**
 * How long the app may take to start: it loads the packages from their TypeScript sources, compiled as they are
 * imported (seconds, and 13 s was seen with both cores busy), before it connects and listens.
 */
const START_MS = 60_000;

/** How long the route's statement runs by itself (its `SLEEP(5)`). */
const STATEMENT_MS = 5_000;
/**
 * How soon a cut statement is gone, and a cut request answered: well before {@link STATEMENT_MS}, so that it was the
 * cut that ended it, with room for what a loaded machine adds (the app is a process of its own, the KILL a round trip
 * to MariaDB).
 */
const CUT_WITHIN_MS = STATEMENT_MS - 1_000;
/**
 * The budget of the request that runs out of it: a second, so that the app has sent the statement before its
 * deadline however slow the machine (the cut then has a statement to stop), and still far short of its 5 s.
 */
const OUT_OF_BUDGET_MS = 1_000;

/** pino's level numbers. */
const WARN = 40;
const ERROR = 50;

/** The app's process: its address and every line it logged. */
class DemoApp {
  readonly logs: LogLine[] = [];
  readonly child: ChildProcess;
  url = '';
  readonly #lines = new EventEmitter();
  #stderr = '';

  constructor() {
    this.child = spawn(process.execPath, ['--conditions=@deadline/source', '--import', sourceHooks, server], {
      env: { ...process.env, MYSQL_URL: MARIADB.url },
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    });
    createInterface({ input: this.child.stdout as NodeJS.ReadableStream }).on('line', (text) => {
      let line: LogLine;
      try {
        line = JSON.parse(text);
      } catch {
        line = { level: 0, msg: text };
      }
      this.logs.push(line);
      this.#lines.emit('line', line);
    });
    this.child.stderr?.on('data', (chunk) => {
      this.#stderr += String(chunk);
    });
  }

  /** Resolves once the app listens (it says where), rejects if it exits first. */
  async listening(): Promise<this> {
    const [message] = (await Promise.race([
      once(this.child, 'message'),
      once(this.child, 'exit').then(([code]) => {
        throw new Error(`the demo app exited (${code}) before listening: ${this.#stderr}`);
      }),
    ])) as [{ url: string }];
    this.url = message.url;
    return this;
  }

  /** The first line since `from` that `matches`, waited for (lines come as the app writes them). */
  line(from: number, matches: (line: LogLine) => boolean): Promise<LogLine> {
    const found = this.logs.slice(from).find(matches);
    if (found !== undefined) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#lines.off('line', onLine);
        reject(new Error(`no such line in 10 s; lines: ${JSON.stringify(this.logs.slice(from))}; ${this.#stderr}`));
      }, 10_000);
      const onLine = (line: LogLine) => {
        if (!matches(line)) return;
        clearTimeout(timer);
        this.#lines.off('line', onLine);
        resolve(line);
      };
      this.#lines.on('line', onLine);
    });
  }

  /** Asks the app to close (it closes when its parent disconnects); kills it if it has not exited within 10 s. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const exited = once(this.child, 'exit');
    this.child.disconnect();
    const stuck = setTimeout(() => this.child.kill(), 10_000);
    await exited;
    clearTimeout(stuck);
  }
}

/** The route's own line for its failed query, the one whose statement carries `mark`. */
const queryFailed = (line: LogLine, mark: string) =>
  line.msg === 'the query failed' && String((line.err as { message?: unknown } | undefined)?.message).includes(mark);

const isDeadlineLine = (line: LogLine) => typeof line.msg === 'string' && line.msg.startsWith('deadline:');

describe.runIf(available)('fastify: an app shaped like the demo (autoload, cors, knex on mysql2, a catch-all)', () => {
  let app: DemoApp;
  let watcher: Watcher;

  beforeAll(async () => {
    [app, watcher] = await Promise.all([new DemoApp().listening(), Watcher.open()]);
  }, START_MS);
  afterAll(async () => {
    await app?.stop();
    await watcher?.end();
  });

  /**
   * Every line the app wrote since `from`, up to now: the lines of a request of `/about` sent now (its own trace id)
   * come after them all (one stream, one process), so waiting for its end line waits for every line before it.
   */
  async function linesSince(from: number): Promise<LogLine[]> {
    const traceId = randomBytes(16).toString('hex');
    const response = await request(`${app.url}/about`, {
      headers: { traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` },
    });
    await response.body.dump();
    const barrier = await app.line(from, (line) => line.msg === 'deadline: ok' && line.traceId === traceId);
    return app.logs.slice(from, app.logs.indexOf(barrier));
  }

  it('starts without a warning: the plugin loaded after cors and a route-adding plugin reads their routes too', async () => {
    expect(app.logs.filter((line) => line.level >= WARN)).toEqual([]);
    // The route a plugin added before the deadline plugin runs with its own config.deadline.
    const about = await request(`${app.url}/about`);
    expect(await about.body.json()).toEqual({ budgetMs: 300 });
    // cors still answers its preflight.
    const preflight = await request(`${app.url}/orders/x`, {
      method: 'OPTIONS',
      headers: { origin: 'http://shop.example', 'access-control-request-method': 'GET' },
    });
    await preflight.body.dump();
    expect(preflight.statusCode).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe('http://shop.example');
  });

  it('a client that leaves mid-query: the library’s one line, the catch-all not reached, the statement gone', async () => {
    const mark = marker();
    const from = app.logs.length;
    const client = new AbortController();
    const pending = request(`${app.url}/orders/${mark}`, { signal: client.signal }).catch((error: unknown) => error);
    await watcher.waitRunning(mark);
    const leftAt = performance.now();
    client.abort();
    await pending;
    const goneAt = await watcher.waitGone(mark);
    console.log(`client left: the statement was gone ${Math.round(goneAt - leftAt)} ms after`);
    expect(goneAt - leftAt).toBeLessThan(CUT_WITHIN_MS);
    const failed = await app.line(from, (line) => queryFailed(line, mark));
    const lines = await linesSince(from);
    console.log(`client left, the app's lines: ${JSON.stringify(lines)}`);
    expect(lines.filter((line) => line.level >= ERROR)).toEqual([]);
    expect(lines.filter((line) => line.msg === 'unexpected error')).toEqual([]);
    const ours = lines.filter((line) => isDeadlineLine(line) && line.path === `/orders/${mark}`);
    expect(ours).toHaveLength(1);
    expect(ours[0]).toMatchObject({ msg: 'deadline: cancelled', outcome: 'cancelled', statusCode: 499, hop: 'demo' });
    // What the handler saw: the cancellation, said once (the KILL's own error is its cause).
    expect(failed.err).toMatchObject({ type: 'CancelledError', reason: 'client-disconnected' });
    expect(repeatedMessages(lines)).toEqual([]);
  });

  it('a request out of budget: 504 naming the hop, its statement stopped, the catch-all not reached, nothing at error level', async () => {
    const mark = marker();
    const from = app.logs.length;
    const sent = performance.now();
    const pending = request(`${app.url}/orders/${mark}`, {
      headers: { 'x-request-deadline': String(OUT_OF_BUDGET_MS) },
    });
    // The statement ran on the server before the cut: the cut had it to stop.
    await watcher.waitRunning(mark);
    const response = await pending;
    const answered = performance.now();
    const body = await response.body.json();
    expect(response.statusCode).toBe(504);
    expect(response.headers['x-deadline-exceeded-by']).toBe('demo');
    expect(body).toMatchObject({ error: 'deadline_exceeded', budgetMs: OUT_OF_BUDGET_MS, exceededBy: 'demo' });
    expect(answered - sent).toBeGreaterThanOrEqual(OUT_OF_BUDGET_MS - 10);
    expect(answered - sent).toBeLessThan(CUT_WITHIN_MS);
    const goneAt = await watcher.waitGone(mark);
    console.log(
      `out of budget: answered ${Math.round(answered - sent)} ms after sending, the statement gone after ${Math.round(goneAt - sent)} ms`,
    );
    expect(goneAt - sent).toBeLessThan(CUT_WITHIN_MS);
    await app.line(from, (line) => queryFailed(line, mark));
    const lines = await linesSince(from);
    console.log(`out of budget, the app's lines: ${JSON.stringify(lines)}`);
    expect(lines.filter((line) => line.level >= ERROR)).toEqual([]);
    expect(lines.filter((line) => line.msg === 'unexpected error')).toEqual([]);
    const ours = lines.filter((line) => isDeadlineLine(line) && line.path === `/orders/${mark}`);
    expect(ours).toHaveLength(1);
    expect(ours[0]).toMatchObject({
      outcome: 'deadline_exceeded',
      statusCode: 504,
      exceededBy: 'demo',
      budgetMs: OUT_OF_BUDGET_MS,
    });
    expect(repeatedMessages(lines)).toEqual([]);
  });
});
