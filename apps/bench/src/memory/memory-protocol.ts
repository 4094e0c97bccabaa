/** Messages between memory.ts and the process it measures (memory-process.ts), over the IPC channel. */

/** What the measured process reports after collecting garbage. */
export interface MemorySnapshot {
  /** `process.memoryUsage().heapUsed`, bytes. */
  heapUsed: number;
  /** Resident set size, bytes. */
  rss: number;
  /** Memory of C++ objects bound to JS (buffers), bytes. */
  external: number;
  /** `abort` listeners on the long-lived signal every request's context follows. */
  listeners: number;
  /** `process.getActiveResourcesInfo().length`: sockets, timers and handles alive. */
  resources: number;
}

export type MemoryParentMessage = { type: 'snapshot'; id: number } | { type: 'close' };

export type MemoryChildMessage =
  | { type: 'ready'; port: number; node: string }
  | { type: 'snapshot'; id: number; snapshot: MemorySnapshot };
