/**
 * One RPC client in its own process, for counting its instructions (instructions.ts), as fetch-client-process.ts
 * is for fetch: `node dist/rpc/rpc-client-process.js <variant> <port> <warm-up> <calls>`, the port being the bare echo
 * server of the variant's stack (rpc-server-process.ts). It calls `warm-up` times (printing `RATE FROM n` a quarter
 * in and `COLLECTING n` at the end), collects all garbage, calls 1,000 times more, prints `WARM`, waits for a line on
 * stdin (the runner switches counting on meanwhile), calls `calls` times, prints `DONE`, and waits to be killed.
 * Four calls in flight at a time, every one inside a deadline context, where the library's client side does its work.
 */
import { once } from 'node:events';
import { runWithDeadline } from '@deadline/core';
import { connectEcho, type EchoCall, grpcEcho, type Side } from './rpc-services.js';

/** The client variants counted, each against its stack's bare server. */
export const RPC_CLIENT_VARIANTS = {
  'grpc-js client, bare': { stack: 'grpc', side: 'bare' },
  'grpc-js client, a deadline per call': { stack: 'grpc', side: 'deadline' },
  'grpc-js client + @deadline/grpc': { stack: 'grpc', side: 'library' },
  'Connect client, bare': { stack: 'connect', side: 'bare' },
  'Connect client, a timeoutMs per call': { stack: 'connect', side: 'deadline' },
  'Connect client + @deadline/connect': { stack: 'connect', side: 'library' },
} as const satisfies Record<string, { stack: 'grpc' | 'connect'; side: Side }>;

/** One of {@link RPC_CLIENT_VARIANTS}' names. */
export type RpcClientVariant = keyof typeof RPC_CLIENT_VARIANTS;

const CONCURRENCY = 4;
const BUDGET_MS = 600_000;
const REWARM = 1_000;

async function callTimes(call: EchoCall, times: number): Promise<void> {
  let left = times;
  const worker = async () => {
    while (left > 0) {
      left--;
      await call();
    }
  };
  await runWithDeadline(BUDGET_MS, () => Promise.all(Array.from({ length: CONCURRENCY }, worker)));
}

const collect = () => (globalThis as { gc?: () => void }).gc?.();

// Only when run as the process: instructions.ts imports the variants' names.
if (process.argv[1]?.endsWith('rpc-client-process.js')) {
  const [variant, port, warmUp, calls] = process.argv.slice(2);
  const chosen = RPC_CLIENT_VARIANTS[variant as RpcClientVariant];
  if (chosen === undefined || port === undefined) {
    console.error(
      `usage: rpc-client-process.js <${Object.keys(RPC_CLIENT_VARIANTS).join(' | ')}> <port> <warm-up> <calls>`,
    );
    process.exit(2);
  }
  const { call } =
    chosen.stack === 'grpc' ? grpcEcho(Number(port), chosen.side) : connectEcho(Number(port), chosen.side);
  const quarter = Math.floor(Number(warmUp) / 4);
  await callTimes(call, quarter);
  console.log(`RATE FROM ${quarter}`);
  await callTimes(call, Number(warmUp) - quarter);
  console.log(`COLLECTING ${warmUp}`);
  collect();
  await callTimes(call, REWARM);
  console.log('WARM');
  await once(process.stdin, 'data');
  await callTimes(call, Number(calls));
  console.log('DONE');
  setInterval(() => {}, 1 << 30);
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => process.exit(0));
}
