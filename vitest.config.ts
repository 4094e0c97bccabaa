import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';
import LongestFirstSequencer from './scripts/test-sequencer.ts';

// One project per package and app, found on disk, so a new package is tested without touching this file; the
// require-tests reporter then fails the run if any project finds no tests.
const repo = fileURLToPath(new URL('.', import.meta.url));
const roots = ['packages', 'apps'].flatMap((dir) =>
  readdirSync(join(repo, dir))
    .map((name) => join(repo, dir, name))
    .filter((path) => statSync(path).isDirectory()),
);

/**
 * How many test files run at once. Most files wait on sockets, timers and servers far more than they compute, so
 * one more than the machine's 2 cores keeps both busy; each file has its own databases, key prefixes and ports
 * (docs/testing.md), and its time bounds hold with the other core busy.
 */
const WORKERS = 3;

/**
 * The files that need the whole machine, run one at a time after the rest: the benchmarks' smoke run keeps both
 * cores busy for its length, which would measure every file beside it.
 */
const ALONE = new Set(['apps/bench/test/smoke.test.ts']);
const aloneFiles = (root: string) =>
  readdirSync(join(root, 'test'), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && ALONE.has(relative(repo, join(entry.parentPath, entry.name))))
    .map((entry) => relative(root, join(entry.parentPath, entry.name)));

/**
 * A package's tests run again against another major of a peer its range allows, where the two behave
 * differently: each variant is a project `<package>:<variant>` whose imports of the peer resolve to the other
 * major, installed beside it under an npm alias (the package's devDependencies). ioredis 6 speaks RESP3 by default
 * and gates commands behind its handshake; `>=5.3.0 <7` promises both.
 */
const VARIANTS: Record<string, { name: string; peer: string; alias: string; exclude?: string[] }[]> = {
  // The suites that name each client they run on (the conformance suites: both ioredis majors, both node-redis
  // majors) and node-redis's own files run once.
  redis: [
    {
      name: 'ioredis6',
      peer: 'ioredis',
      alias: 'ioredis6',
      exclude: ['test/conformance/**', 'test/node-redis*.test.ts'],
    },
  ],
};

function projectsOf(root: string) {
  const name = basename(root);
  const alone = existsSync(join(root, 'test')) ? aloneFiles(root) : [];
  const main = { name, root, include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude, ...alone] };
  const projects: object[] = [{ extends: true as const, test: main }];
  for (const variant of VARIANTS[name] ?? []) {
    projects.push({
      extends: true as const,
      resolve: { alias: [{ find: new RegExp(`^${variant.peer}$`), replacement: variant.alias }] },
      test: { ...main, name: `${name}:${variant.name}`, exclude: [...main.exclude, ...(variant.exclude ?? [])] },
    });
  }
  if (alone.length > 0) {
    projects.push({
      extends: true as const,
      test: { name: `${name}:alone`, root, include: alone, maxWorkers: 1, sequence: { groupOrder: 1 } },
    });
  }
  return projects;
}

export default defineConfig({
  // Tests run against the TypeScript sources (see the "@deadline/source" export condition), so no build is
  // needed to test; the CommonJS/dist checks in test/ use the built output on purpose.
  resolve: { conditions: ['@deadline/source'] },
  ssr: { resolve: { conditions: ['@deadline/source'] } },
  test: {
    projects: [
      ...roots.flatMap(projectsOf),
      { extends: true as const, test: { name: 'repo', root: join(repo, 'test'), include: ['**/*.test.ts'] } },
    ],
    maxWorkers: WORKERS,
    sequence: { sequencer: LongestFirstSequencer },
    reporters: ['default', join(repo, 'scripts/require-tests-reporter.ts')],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
