/** The gateway alone, in front of a stand-in orders server: the route's SLA as the budget, forwarded. */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { request } from 'undici';
import { expect, it } from 'vitest';
import { startGateway } from '../src/service.ts';

const quiet = pino(new Writable({ write: (_c, _e, done) => done() }));

it('sets the budget from the route SLA when the client sends none, and forwards what is left', async () => {
  const seen: string[] = [];
  const orders = createServer((req, res) => {
    seen.push(String(req.headers['x-request-deadline']));
    res.setHeader('content-type', 'application/json');
    res.end('{"ok":true}');
  }).listen(0, '127.0.0.1');
  await once(orders, 'listening');
  const gateway = await startGateway({
    ordersUrl: `http://127.0.0.1:${(orders.address() as AddressInfo).port}`,
    logger: quiet,
    slaMs: 700,
  });
  try {
    const sentAt = performance.now();
    const response = await request(`${gateway.url}/orders/1`);
    const elapsed = performance.now() - sentAt;
    expect(response.statusCode).toBe(200);
    expect(await response.body.json()).toEqual({ ok: true });
    // The SLA less the gateway's margin, less what passed before it forwarded (at most the whole request's time,
    // however slow the machine).
    expect(Number(seen[0])).toBeGreaterThanOrEqual(695 - elapsed - 1);
    expect(Number(seen[0])).toBeLessThanOrEqual(695);
  } finally {
    await gateway.close();
    orders.close();
  }
});
