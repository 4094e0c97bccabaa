/**
 * A bare node:http hello-world server in its own process, the downstream of the fetch benchmark: prints
 * `READY <port>` once listening.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const body = JSON.stringify({ hello: 'world' });
const server = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
});
// Idle connections kept for a minute, not Node's 5 s: a client counted under valgrind may pause that long between
// its warm-up and its window, and a connection the server closes just as the client reuses it fails that fetch.
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => console.log(`READY ${(server.address() as AddressInfo).port}`));
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => process.exit(0));
