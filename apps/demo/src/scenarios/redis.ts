/**
 * 6. Redis: a blocking pop under a 300 ms budget, on ioredis and on node-redis. With the library the server-side
 * timeout is clamped into the budget, and a connection released early is unblocked on the server; a client-side
 * timeout alone (ioredis's `commandTimeout`, node-redis's `abortSignal` with `rejectInFlight`) leaves the connection
 * blocked, and an element pushed later is popped by the abandoned BLPOP — and lost.
 */
import { runWithDeadline } from '@deadline/core';
import { withDeadline } from '@deadline/redis';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { until } from '../client.js';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';

/** One client to pop with: its connection id, the pop under a 300 ms budget, closing it. */
interface Popper {
  label: string;
  open(url: string): Promise<{ id: string; pop(key: string): Promise<unknown>; close(): void }>;
}

const POPPERS: Popper[] = [
  {
    label: '@deadline/redis on ioredis',
    async open(url) {
      const raw = new Redis(url, { maxRetriesPerRequest: 1 });
      const redis = withDeadline(raw);
      const id = String(await raw.client('ID'));
      return { id, pop: (key) => runWithDeadline(300, () => redis.blpop(key, 0)), close: () => raw.disconnect() };
    },
  },
  {
    label: '@deadline/redis on node-redis',
    async open(url) {
      const client = withDeadline(await createClient({ url }).connect());
      const id = String(await client.clientId());
      return { id, pop: (key) => runWithDeadline(300, () => client.blPop(key, 0)), close: () => client.destroy() };
    },
  },
  {
    label: 'ioredis, commandTimeout 300',
    async open(url) {
      const raw = new Redis(url, { commandTimeout: 300 });
      const id = String(await raw.client('ID'));
      return { id, pop: (key) => raw.blpop(key, 0), close: () => raw.disconnect() };
    },
  },
  {
    // node-redis's `timeout` leaves a written blocking command alone; its `abortSignal` with `rejectInFlight` does not.
    label: 'node-redis, abortSignal 300 ms (rejectInFlight)',
    async open(url) {
      const client = await createClient({ url }).connect();
      const id = String(await client.clientId());
      const timed = () => client.withCommandOptions({ abortSignal: AbortSignal.timeout(300), rejectInFlight: true });
      return { id, pop: (key) => timed().blPop(key, 0), close: () => client.destroy() };
    },
  },
];

export async function redisBlocking(ctx: ScenarioContext): Promise<ScenarioTable> {
  const title = 'Redis: BLPOP key 0 under a 300 ms budget';
  const columns = [
    'client',
    'returned after (ms)',
    'still blocked on the server 500 ms later',
    'an element pushed afterwards',
  ];
  const url = ctx.env.redisUrl;
  if (url === undefined) return { id: 6, title, columns, rows: [], skipped: ctx.env.redisMissing };
  const admin = new Redis(url);
  const rows: ScenarioTable['rows'] = [];
  const blocked = async (id: string) =>
    String(await admin.client('LIST'))
      .split('\n')
      .some((line) => line.includes(`id=${id} `) && /\bflags=\S*b/.test(line));
  try {
    for (const [i, popper] of POPPERS.entries()) {
      const client = await popper.open(url);
      const key = `deadline:demo:${process.pid}:${i}`;
      await admin.del(key);
      const started = performance.now();
      await client.pop(key).catch(() => {});
      const returned = performance.now() - started;
      // Released on the server (CLIENT UNBLOCK travels on a side connection): give it half a second to show.
      const stillBlocked = !(await until(async () => !(await blocked(client.id)), 500));
      await admin.lpush(key, 'order-42');
      // Give an abandoned BLPOP the chance to take it (a round trip on its connection is enough).
      await admin.ping();
      const kept = (await admin.llen(key)) === 1;
      rows.push([
        popper.label,
        Math.round(returned),
        stillBlocked ? 'yes' : 'no',
        kept ? 'kept' : 'lost (popped by the abandoned BLPOP)',
      ]);
      await admin.del(key);
      client.close();
    }
  } finally {
    admin.disconnect();
  }
  return {
    id: 6,
    title,
    columns,
    rows,
    note: 'Nothing lost on either client: the library clamps the server-side timeout and releases the connection with CLIENT UNBLOCK.',
  };
}
