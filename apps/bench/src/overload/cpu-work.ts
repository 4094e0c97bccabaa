/**
 * The CPU a handler of the CPU-bound chain spends on each request: rounds of what handlers spend their own CPU on —
 * an order serialized to JSON, parsed back and hashed (SHA-256), each round's digest feeding the next — until the
 * process has used a fixed number of ms of CPU time (`process.cpuUsage()`, user + system), on every hop and in every
 * variant alike.
 *
 * CPU time, not a fixed number of rounds: on this VM a round's CPU time moves with what else runs (a count
 * calibrated on the runner at the start, tried first, came to 3.0–3.2 ms per handler in one run and 5.3 ms in
 * another). The event loop is what is scarce here, and a fixed CPU time is a fixed share of it. `process.cpuUsage()` counts the process's other threads too (V8's collector and compiler threads,
 * when they run beside the loop), which can shorten the loop's own share by as much; Node 20 has no
 * `process.threadCpuUsage()`.
 */
import { createHash } from 'node:crypto';

/** Keeps the result alive: work nothing reads could be optimised away. */
let sink = '';

/** `rounds` rounds of JSON and SHA-256, synchronously, on this thread. */
function burn(rounds: number): void {
  let digest = sink.slice(0, 8);
  for (let i = 0; i < rounds; i++) {
    const order = {
      id: i,
      digest,
      lines: [
        { sku: 'sku-1', quantity: 2, price: 9.99 },
        { sku: 'sku-2', quantity: 1, price: 24.5 },
      ],
      note: 'overload',
    };
    const json = JSON.stringify(order);
    digest = createHash('sha256')
      .update((JSON.parse(json) as { digest: string }).digest)
      .update(json)
      .digest('hex');
  }
  sink = digest;
}

/** Rounds between two looks at the clock: some 30–60 µs of work, against ~1 µs for a look. */
const ROUNDS_PER_LOOK = 8;

/**
 * Works, synchronously, until this process has used `cpuMs` of CPU time since the call (a round at most beyond);
 * returns the CPU time it used (µs).
 */
export function spendCpu(cpuMs: number): number {
  const start = process.cpuUsage();
  const target = cpuMs * 1000;
  for (;;) {
    burn(ROUNDS_PER_LOOK);
    const used = process.cpuUsage(start);
    const micros = used.user + used.system;
    if (micros >= target) return micros;
  }
}
