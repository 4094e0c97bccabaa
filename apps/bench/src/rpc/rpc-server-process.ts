/**
 * The echo servers of the RPC benchmark (rpc-services.ts) in their own process: prints `RPC <name> <port>` for
 * each (`grpc bare`, `grpc library`, `connect bare`, `connect library`), then `READY`; answers each `CPU` line on
 * stdin with `CPU <µs>`, the CPU time it has used so far (user + system), so that a round's cost counts both ends.
 */
import { createInterface } from 'node:readline';
import { startEchoServers } from './rpc-services.js';

const ports = await startEchoServers();
for (const [name, port] of Object.entries(ports)) console.log(`RPC ${name} ${port}`);
console.log('READY');
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() !== 'CPU') continue;
  const { user, system } = process.cpuUsage();
  console.log(`CPU ${user + system}`);
}
process.exit(0);
