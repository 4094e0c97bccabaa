/**
 * The hop of the admission scenario (admission.ts), in a worker thread: an inventory whose handler spends CPU per
 * request, on an event loop of its own — as a service in its own process would be, so that the scenario's clients are
 * not held up by the loop they are overloading. It says its URL when listening; asked `'ran'`, which requests its
 * handler ran and for how long (and forgets them); asked `'close'`, it stops.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { startInventory } from '@deadline/demo-inventory';
import pg from 'pg';
import pino from 'pino';

export interface AdmissionHopData {
  postgresUrl: string;
  admission: boolean;
  cpuMs: number;
}

const { postgresUrl, admission, cpuMs } = workerData as AdmissionHopData;
const port = parentPort;
if (port === null) throw new Error('admission-hop.js runs in a worker thread');
const pool = new pg.Pool({ connectionString: postgresUrl, max: 5, idleTimeoutMillis: 0 });
pool.on('error', () => {});
const ran = new Map<string, number>();
const inventory = await startInventory({
  pool,
  logger: pino({ level: 'silent' }),
  keepReports: false,
  shortQuery: true,
  admission,
  handlerWork: (rid) => {
    const started = performance.now();
    while (performance.now() - started < cpuMs) {
      // CPU: parsing, rendering, crypto — what a handler spends before it answers
    }
    if (rid !== undefined) ran.set(rid, performance.now() - started);
  },
});
port.on('message', async (message: unknown) => {
  if (message === 'ran') {
    port.postMessage({ ran: [...ran] });
    ran.clear();
  } else if (message === 'close') {
    await inventory.close();
    await pool.end();
    port.close();
  }
});
port.postMessage({ url: inventory.url });
