import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, relative } from 'node:path';
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
const ALONE = new Set(['apps/bench/test/smoke.test.ts', 'packages/amqp/test/broker-restart.test.ts']);
const aloneFiles = (root: string) =>
  readdirSync(join(root, 'test'), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && ALONE.has(relative(repo, join(entry.parentPath, entry.name))))
    .map((entry) => relative(root, join(entry.parentPath, entry.name)));

/** An import a variant resolves elsewhere (a vite alias): the specifiers `find` matches, and what replaces the match. */
type Redirect = { find: RegExp; replacement: string };

/** The peer itself to the other major, installed beside it under an npm alias: `ioredis` → `ioredis6`. */
const aliased = (peer: string, alias: string): Redirect => ({ find: new RegExp(`^${peer}$`), replacement: alias });

/**
 * Every import of a scope's packages, `@nestjs/<name>` and `@nestjs/<name>/<subpath>`, to the same path under `dir`:
 * the other major installed apart, in a workspace of its own. A peer made of several packages that require one
 * another cannot be an npm alias: its packages' own imports, which Node resolves and no alias reaches, would find the
 * workspace's major; apart, each finds its neighbours of the same major. A package of the scope not installed under
 * `dir` fails to resolve, rather than mixing the majors.
 */
const scopeIn = (scope: string, dir: string): Redirect => ({
  find: new RegExp(`^${scope}/`),
  replacement: `${join(dir, scope)}/`,
});

/**
 * A dependency vite runs (`inline`) whose files name source maps it does not ship (nestjs-cls's): loaded without the
 * dangling `sourceMappingURL` comment, or vite warns once for each of its files that the map is missing.
 */
function withoutMissingMaps(packages: string[]) {
  const dirs = packages.map((name) => `/node_modules/${name}/`);
  return {
    name: 'deadline:without-missing-maps',
    load(id: string) {
      if (!id.endsWith('.js') || !dirs.some((dir) => id.includes(dir))) return null;
      const code = readFileSync(id, 'utf8');
      const comment = /\n\/\/# sourceMappingURL=(\S+)\s*$/.exec(code);
      return comment?.[1] !== undefined && !existsSync(join(dirname(id), comment[1]))
        ? code.slice(0, comment.index)
        : null;
    },
  };
}

interface Variant {
  name: string;
  /** The imports of the package's sources and tests that resolve to the other major. */
  imports: Redirect[];
  /**
   * Dependencies that import the peer themselves, run by vite in the variant so that `imports` reach theirs too:
   * left to Node, they would load the workspace's major beside the other.
   */
  inline?: string[];
  exclude?: string[];
}

/**
 * A package's tests run again against another major of a peer its range allows, where the two behave
 * differently: each variant is a project `<package>:<variant>` whose imports of the peer resolve to the other
 * major, installed beside it under an npm alias (the package's devDependencies) or apart (`test/<major>`). ioredis 6
 * speaks RESP3 by default and gates commands behind its handshake; `>=5.3.0 <7` promises both. NestJS 11 is CommonJS
 * and 12 ESM, on their own majors of express and fastify; `^11.0.0 || ^12.0.0` promises both.
 */
const VARIANTS: Record<string, Variant[]> = {
  // graphql-js's own execute on graphql 17 (the servers' suites run on 16, the major Apollo Server and Mercurius take).
  graphql: [
    {
      name: 'graphql17',
      imports: [aliased('graphql', 'graphql17')],
      exclude: ['test/apollo.test.ts', 'test/yoga.test.ts', 'test/mercurius.test.ts'],
    },
  ],
  // The suites that name each client they run on (the conformance suites: both ioredis majors, both node-redis
  // majors) and node-redis's own files run once.
  redis: [
    {
      name: 'ioredis6',
      imports: [aliased('ioredis', 'ioredis6')],
      exclude: ['test/conformance/**', 'test/node-redis*.test.ts'],
    },
  ],
  // All of Nest from test/nest11, nestjs-cls's imports of it too: one Nest 12 class in the app (`HttpAdapterHost`,
  // `Reflector`) is an injection token Nest 11 does not know.
  nestjs: [
    {
      name: 'nest11',
      imports: [scopeIn('@nestjs', join(repo, 'test/nest11/node_modules'))],
      inline: ['nestjs-cls'],
      // NestJS 11 runs the suites that meet its own code: the platforms' conformance, the module's options, the
      // microservices' transports. Work left running, the app-shaped test and gRPC (grpc-js's deadline, read the same
      // way under both) are the platform adapters' and the library's, run once: the suite stays within its time.
      exclude: ['test/unawaited-work.test.ts', 'test/app.test.ts', 'test/grpc-transport.test.ts'],
    },
  ],
};

/**
 * Imports a package's project resolves as Node does, where vite would not: graphql 16 ships ESM (`index.mjs`, its
 * `module` field) beside CommonJS with no exports map, so vite gives our sources the ESM copy while Node gives Apollo
 * Server and Mercurius the CommonJS one — two graphql realms, which graphql refuses ("from another module or realm").
 * Without vite (an app) there is one.
 */
const AS_NODE_RESOLVES: Record<string, Redirect[]> = {
  graphql: [{ find: /^graphql$/, replacement: createRequire(join(repo, 'packages/graphql/')).resolve('graphql') }],
};

function projectsOf(root: string) {
  const name = basename(root);
  const alone = existsSync(join(root, 'test')) ? aloneFiles(root) : [];
  const main = { name, root, include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude, ...alone] };
  const asNode = AS_NODE_RESOLVES[name];
  const projects: object[] = [
    { extends: true as const, ...(asNode === undefined ? {} : { resolve: { alias: asNode } }), test: main },
  ];
  for (const variant of VARIANTS[name] ?? []) {
    const inline = variant.inline ?? [];
    projects.push({
      extends: true as const,
      plugins: inline.length > 0 ? [withoutMissingMaps(inline)] : [],
      resolve: { alias: variant.imports },
      test: {
        ...main,
        name: `${name}:${variant.name}`,
        exclude: [...main.exclude, ...(variant.exclude ?? [])],
        ...(inline.length > 0 ? { server: { deps: { inline } } } : {}),
      },
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
