/**
 * Every package must load from a CommonJS app on Node ≥ 20.19 (require(esm)). Runs against the built output,
 * in a separate plain-node process, exactly as an application would load it.
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const repo = fileURLToPath(new URL('..', import.meta.url));

/** Every entry point of every publishable package, from its exports map. */
function entryPoints(): string[] {
  const names: string[] = [];
  for (const dir of readdirSync(join(repo, 'packages'))) {
    const manifest = JSON.parse(readFileSync(join(repo, 'packages', dir, 'package.json'), 'utf8'));
    for (const subpath of Object.keys(manifest.exports ?? { '.': null })) {
      if (subpath.endsWith('.json')) continue;
      names.push(subpath === '.' ? manifest.name : `${manifest.name}/${subpath.slice(2)}`);
    }
  }
  return names;
}

it('a CommonJS app can require() every package and gets the ESM instance', async () => {
  const packages = entryPoints();
  expect(packages).toContain('@deadline/core');
  const { stdout, stderr } = await promisify(execFile)(
    process.execPath,
    [join(repo, 'test/fixtures/cjs-app.cjs'), ...packages],
    { cwd: repo },
  );
  const results = JSON.parse(stdout);
  for (const name of packages) {
    expect(results[name].exports, name).toBeGreaterThan(0);
    expect(results[name].mismatched, name).toEqual([]);
  }
  expect(results.sharedContext).toBe(true);
  expect(stderr).not.toMatch(/Error/);
});
