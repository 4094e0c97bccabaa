import { readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// One project per package and app, found on disk, so a new package is tested without touching this file; the
// require-tests reporter then fails the run if any project finds no tests.
const repo = fileURLToPath(new URL('.', import.meta.url));
const roots = ['packages', 'apps'].flatMap((dir) =>
  readdirSync(join(repo, dir))
    .map((name) => join(repo, dir, name))
    .filter((path) => statSync(path).isDirectory()),
);

export default defineConfig({
  // Tests run against the TypeScript sources (see the "@deadline/source" export condition), so no build is
  // needed to test; the CommonJS/dist checks in test/ use the built output on purpose.
  resolve: { conditions: ['@deadline/source'] },
  ssr: { resolve: { conditions: ['@deadline/source'] } },
  test: {
    projects: [
      ...roots.map((root) => ({
        extends: true as const,
        test: { name: basename(root), root, include: ['test/**/*.test.ts'] },
      })),
      { extends: true as const, test: { name: 'repo', root: join(repo, 'test'), include: ['**/*.test.ts'] } },
    ],
    reporters: ['default', join(repo, 'scripts/require-tests-reporter.ts')],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
