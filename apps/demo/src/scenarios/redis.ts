/**
 * 6. Redis: a blocking pop under a 300 ms budget. With the library the server-side timeout is clamped into the
 * budget, and a connection released early is unblocked on the server; a client-side timeout alone leaves the
 * connection blocked, and an element pushed later is popped by the abandoned BLPOP — and lost.
 */
import { runWithDeadline } from '@deadline/core';
import { withDeadline } from '@deadline/redis';
import { Redis } from 'ioredis';
import { until } from '../client.js';
import type { ScenarioTable } from '../report/table.js';
import type { ScenarioContext } from './context.js';

export async function redisBlocking(ctx: ScenarioContext): Promise<ScenarioTable> {
  const title = 'Redis: BLPOP key 0 under a 300 ms budget';
  const columns = [
    'client',
    'returned after (ms)',
    'still blocked on the server 500 ms later',
    'an element pushed afterwards',
  ];
  if (ctx.env.redisUrl === undefined) return { id: 6, title, columns, rows: [], skipped: ctx.env.redisMissing };
  const admin = new Redis(ctx.env.redisUrl);
  const rows: ScenarioTable['rows'] = [];
  const blocked = async (id: string) =>
    String(await admin.client('LIST'))
      .split('\n')
      .some((line) => line.includes(`id=${id} `) && /\bflags=\S*b/.test(line));
  try {
    for (const mode of ['library', 'plain'] as const) {
      const raw = new Redis(ctx.env.redisUrl, mode === 'plain' ? { commandTimeout: 300 } : { maxRetriesPerRequest: 1 });
      const id = String(await raw.client('ID'));
      const key = `deadline:demo:${process.pid}:${mode}`;
      await admin.del(key);
      const started = performance.now();
      if (mode === 'library') await runWithDeadline(300, () => withDeadline(raw).blpop(key, 0)).catch(() => {});
      else await raw.blpop(key, 0).catch(() => {});
      const returned = performance.now() - started;
      // Released on the server (CLIENT UNBLOCK travels on a side connection): give it half a second to show.
      const stillBlocked = !(await until(async () => !(await blocked(id)), 500));
      await admin.lpush(key, 'order-42');
      // Give an abandoned BLPOP the chance to take it (a round trip on its connection is enough).
      await admin.ping();
      const kept = (await admin.llen(key)) === 1;
      rows.push([
        mode === 'library' ? '@deadline/redis' : 'ioredis, commandTimeout 300',
        Math.round(returned),
        stillBlocked ? 'yes' : 'no',
        kept ? 'kept' : 'lost (popped by the abandoned BLPOP)',
      ]);
      await admin.del(key);
      raw.disconnect();
    }
  } finally {
    admin.disconnect();
  }
  return {
    id: 6,
    title,
    columns,
    rows,
    note: 'Nothing lost: the library clamps the server-side timeout and releases the connection with CLIENT UNBLOCK.',
  };
}
