import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';

// One project per package and app, found on disk, so a new package is tested without touching this file; the
// require-tests reporter then fails the run if any project finds no tests.
const repo = fileURLToPath(new URL('.', import.meta.url));
const roots = ['packages', 'apps'].flatMap((dir) =>
  readdirSync(join(repo, dir))
    .map((name) => join(repo, dir, name))
    .filter((path) => statSync(path).isDirectory()),
);

/**
 * Two test files at a time, except in these projects, whose files run one at a time after the rest: they load
 * the machine (the bench's smoke run keeps both cores busy; core's leak and property tests, the TSDoc check and
 * the Redis fault tests spin) or hold bounds of a few ms (Redis exactness, resilience's retry timings) that a
 * file on the other core upsets. The others wait on sockets and servers most of the time. Measured on 2 cores:
 * every file one at a time took 430 s on Node 20; see .ci/run for the times this split gives.
 */
const SERIAL = new Set(['bench', 'core', 'redis', 'resilience', 'repo']);
const workers = (name: string) => ({ maxWorkers: SERIAL.has(name) ? 1 : 2 });

/**
 * The files that drop a server's connections or restart a private server under a measured load (`faults`,
 * `bullmq-faults`, `server-runs`): they also run one at a time after the rest, in a project of their own
 * (`<package>:faults`). Beside each other they measure each other: a private MariaDB starting up took the
 * other core for a second, and a load with a 1 s budget next to it missed its recovery rate (Node 26, CI).
 */
const FAULTS = /(^|-)faults\.test\.ts$|^server-runs\.test\.ts$/;
const faultFiles = (root: string) =>
  readdirSync(join(root, 'test'), { withFileTypes: true })
    .filter((entry) => entry.isFile() && FAULTS.test(entry.name))
    .map((entry) => `test/${entry.name}`);

function projectsOf(root: string) {
  const name = basename(root);
  const faults = existsSync(join(root, 'test')) ? faultFiles(root) : [];
  const main = {
    name,
    root,
    include: ['test/**/*.test.ts'],
    exclude: [...configDefaults.exclude, ...faults],
    ...workers(name),
  };
  if (faults.length === 0) return [{ extends: true as const, test: main }];
  return [
    { extends: true as const, test: main },
    { extends: true as const, test: { name: `${name}:faults`, root, include: faults, maxWorkers: 1 } },
  ];
}

export default defineConfig({
  // Tests run against the TypeScript sources (see the "@deadline/source" export condition), so no build is
  // needed to test; the CommonJS/dist checks in test/ use the built output on purpose.
  resolve: { conditions: ['@deadline/source'] },
  ssr: { resolve: { conditions: ['@deadline/source'] } },
  test: {
    projects: [
      ...roots.flatMap(projectsOf),
      {
        extends: true as const,
        test: { name: 'repo', root: join(repo, 'test'), include: ['**/*.test.ts'], ...workers('repo') },
      },
    ],
    reporters: ['default', join(repo, 'scripts/require-tests-reporter.ts')],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
