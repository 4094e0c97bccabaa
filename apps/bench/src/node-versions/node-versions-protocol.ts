/** Messages from node-versions-process.ts (the overhead run under another Node) to node-versions.ts, over IPC. */
import type { OverheadRow } from '../overhead/overhead.js';

export type OverheadChildMessage =
  | { type: 'progress'; line: string }
  | { type: 'rows'; rows: OverheadRow[] }
  | { type: 'error'; message: string };
