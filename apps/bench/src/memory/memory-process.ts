/**
 * The process measured by memory.ts: `node --expose-gc dist/memory/memory-process.js <downstream url>`, started with an
 * IPC channel. A fastify app with @deadline/fastify whose one route makes one outgoing call (createFetch) to the
 * downstream, inside a context that follows a long-lived AbortSignal — the shape of an app that hands every
 * request its shutdown signal. It answers `{ type: 'ready', port }`, then a snapshot (after GC) for every
 * `snapshot` message, and closes everything on `close`.
 */
import { getEventListeners, setMaxListeners } from 'node:events';
import type { AddressInfo } from 'node:net';
import { setImmediate as tick } from 'node:timers/promises';
import { runWithContext } from '@deadline/core';
import { fastifyDeadline } from '@deadline/fastify';
import { createFetch } from '@deadline/http';
import Fastify from 'fastify';
import { Agent } from 'undici';
import type { MemoryChildMessage, MemoryParentMessage, MemorySnapshot } from './memory-protocol.js';

const downstream = process.argv[2];
const gc = (globalThis as { gc?: () => void }).gc;
if (downstream === undefined || gc === undefined || process.send === undefined) {
  console.error('usage: node --expose-gc memory-process.js <downstream url>, with an IPC channel');
  process.exit(2);
}
const send = (message: MemoryChildMessage) => process.send?.(message);

// Lives as long as the process: the server's shutdown signal, given to every request's context.
const shutdown = new AbortController();
// One listener per request in flight is expected (and taken back when it ends: that is what is counted).
setMaxListeners(0, shutdown.signal);
const agent = new Agent({ keepAliveTimeout: 60_000 });
const fetchDownstream = createFetch({ dispatcher: agent });

const app = Fastify({ logger: false });
await app.register(fastifyDeadline, { serviceName: 'memory' });
app.get('/', (request) =>
  runWithContext({ signal: shutdown.signal }, async () => {
    const res = await fetchDownstream(downstream);
    const body = await res.text();
    if (res.status !== 200) throw new Error(`downstream answered ${res.status}`);
    return { downstream: body.length, left: request.deadline?.remainingMs() ?? null };
  }),
);
await app.listen({ port: 0, host: '127.0.0.1' });

async function snapshot(): Promise<MemorySnapshot> {
  // Let finished requests' callbacks, timers of zero and FinalizationRegistry cleanups run, then collect until
  // the heap stops shrinking (a few full GCs: weak references and finalizers need more than one).
  let last = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 10; i++) {
    await tick();
    await new Promise((resolve) => setTimeout(resolve, 20));
    gc?.();
    const used = process.memoryUsage().heapUsed;
    if (i >= 3 && Math.abs(last - used) < 64 * 1024) break;
    last = used;
  }
  const memory = process.memoryUsage();
  return {
    heapUsed: memory.heapUsed,
    rss: memory.rss,
    external: memory.external,
    listeners: getEventListeners(shutdown.signal, 'abort').length,
    resources: process.getActiveResourcesInfo().length,
  };
}

process.on('message', (message: MemoryParentMessage) => {
  if (message.type === 'snapshot') {
    snapshot().then((s) => send({ type: 'snapshot', id: message.id, snapshot: s }));
  } else if (message.type === 'close') {
    Promise.all([app.close(), agent.close()]).finally(() => process.disconnect());
  }
});
const port = (app.server.address() as AddressInfo).port;
send({ type: 'ready', port, node: process.version });
