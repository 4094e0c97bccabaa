/**
 * The hop that never answers, for the precision benchmark, in a process of its own (so that its accepts and
 * socket work never run on the measured client's event loop): `node dist/precision/precision-silent-server.js` accepts
 * TCP connections, reads nothing back, says nothing, prints `READY <port>` once listening and runs until killed.
 */
import { type AddressInfo, createServer } from 'node:net';

const server = createServer((socket) => {
  // The client destroys its socket at its deadline: a reset is expected, not an error worth a crash.
  socket.on('error', () => {});
});
server.listen(0, '127.0.0.1', () => console.log(`READY ${(server.address() as AddressInfo).port}`));
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => process.exit(0));
