/**
 * The overhead measurement under whichever node runs this file: `<node> dist/node-versions/node-versions-process.js
 * '<OverheadOptions as JSON>'`, started with an IPC channel by node-versions.ts. Its server processes are
 * spawned with `process.execPath`, so they run on this node too. Reports progress and the rows over IPC.
 */

import { measureOverhead, type OverheadOptions } from '../overhead/overhead.js';
import type { OverheadChildMessage } from './node-versions-protocol.js';

const send = (message: OverheadChildMessage) =>
  new Promise<void>((resolve) => {
    if (process.send === undefined) resolve();
    else process.send(message, undefined, undefined, () => resolve());
  });

if (process.send === undefined) {
  console.error("usage: node node-versions-process.js '<options as JSON>', with an IPC channel");
  process.exit(2);
}
try {
  const options = JSON.parse(process.argv[2] ?? '') as OverheadOptions;
  const rows = await measureOverhead(options, (line) => void send({ type: 'progress', line }));
  await send({ type: 'rows', rows });
} catch (error) {
  await send({ type: 'error', message: error instanceof Error ? (error.stack ?? error.message) : String(error) });
  process.exitCode = 1;
}
process.disconnect();
