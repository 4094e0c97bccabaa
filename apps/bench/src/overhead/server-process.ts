/**
 * One benchmark server in its own process: `node dist/overhead/server-process.js <variant>` prints `READY <port>` once
 * listening, and serves until killed.
 */
import type { AddressInfo } from 'node:net';
import { VARIANTS, type Variant } from './servers.js';

const variant = process.argv[2] as Variant;
const start = VARIANTS[variant];
if (start === undefined) {
  console.error(`unknown variant ${variant}; one of: ${Object.keys(VARIANTS).join(', ')}`);
  process.exit(2);
}
const server = await start();
console.log(`READY ${(server.address() as AddressInfo).port}`);
// Exit cleanly when the runner is done (so `--cpu-prof` and friends can write their files).
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => process.exit(0));
