/**
 * The demo's own PostgreSQL (no DATABASE_URL): it starts from the npm package's binaries and is removed; when it
 * cannot start, or a given server does not answer, the demo says why in one line, with no stack, and exits 1 — as
 * it does for any other failure, naming the step it was at.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, lstat, mkdir, mkdtemp, readdir, readFile, readlink, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { prepareEnvironment } from '../src/environment.ts';
import { startEmbeddedPostgres } from '../src/postgres/server.ts';
import { stageTree } from '../src/postgres/stage.ts';

const main = fileURLToPath(new URL('../dist/main.js', import.meta.url));

let scratch: string;
beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'deadline-demo-test-'));
});
afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

/** Runs the built demo (`npm run demo` runs the same file) with `env`; resolves with its exit code and stderr. */
function runDemo(env: Record<string, string | undefined>): Promise<{ code: number | null; stderr: string }> {
  if (!existsSync(main)) throw new Error(`${main} is missing: build first (npm run build)`);
  const { DATABASE_URL: _, ...rest } = process.env;
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [main, '--quick'],
      { env: { ...rest, ...env }, timeout: 60_000 },
      (error, _out, stderr) =>
        resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : null, stderr }),
    );
  });
}

/** The message the demo ends with: its last stderr line, and that no line of a stack trace came before it. */
function lastWords(stderr: string): string {
  const lines = stderr.trim().split('\n');
  expect(lines.filter((line) => /^\s+at /.test(line))).toEqual([]);
  return lines.at(-1) ?? '';
}

describe('the embedded PostgreSQL (no DATABASE_URL)', () => {
  it('starts from the npm package, answers, and is removed', async () => {
    const saved = { DATABASE_URL: process.env.DATABASE_URL, TMPDIR: process.env.TMPDIR };
    // A TMPDIR of this test's own, to see what is left in it; reachable by the server's account (run as root).
    const tmp = join(scratch, 'tmp');
    await mkdir(tmp, { mode: 0o755 });
    await chmod(scratch, 0o755);
    delete process.env.DATABASE_URL;
    process.env.TMPDIR = tmp;
    try {
      const env = await prepareEnvironment();
      try {
        expect(env.postgres).toMatch(/embedded PostgreSQL \d+/);
        expect((await env.pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
        expect(await readdir(tmp)).toEqual([expect.stringMatching(/^deadline-demo-pg-/)]);
      } finally {
        await env.close();
      }
      expect(await readdir(tmp)).toEqual([]);
    } finally {
      for (const [name, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
  }, 60_000);

  it('says in one line that its port is taken', async () => {
    const taken: Server = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const { port } = taken.address() as { port: number };
    try {
      const error: Error = await startEmbeddedPostgres({ port }).then(
        () => expect.fail('started on a port in use'),
        (reason: Error) => reason,
      );
      expect(error.message).toBe(`port ${port} on 127.0.0.1 is in use`);
    } finally {
      taken.close();
    }
  }, 60_000);

  it('npm run demo: when it cannot start, one line saying why and how to use DATABASE_URL, exit code 1', async () => {
    // TMPDIR a file: there is nowhere to put the cluster.
    const notADirectory = join(scratch, 'not-a-directory');
    await writeFile(notADirectory, '');
    const { code, stderr } = await runDemo({ TMPDIR: notADirectory });
    expect(code).toBe(1);
    expect(lastWords(stderr)).toMatch(
      new RegExp(
        `^demo: the embedded PostgreSQL did not start: cannot make a directory in ${notADirectory} \\(ENOTDIR\\); set TMPDIR\\. .*DATABASE_URL=postgres://`,
      ),
    );
  }, 60_000);

  it('npm run demo: a DATABASE_URL nothing answers at is named (without its password), exit code 1', async () => {
    const { code, stderr } = await runDemo({ DATABASE_URL: 'postgres://someone:secret@127.0.0.1:1/shop' });
    expect(code).toBe(1);
    const message = lastWords(stderr);
    expect(message).toMatch(/^demo: cannot use PostgreSQL at 127\.0\.0\.1:1\/shop: .*ECONNREFUSED.*DATABASE_URL/);
    expect(message).not.toContain('secret');
  }, 60_000);
});

describe.runIf(await requireService(POSTGRES))(
  'npm run demo on a PostgreSQL where it may not create its tables',
  () => {
    it('one line naming the step and the error (no stack; the stack in demo-error.log), exit code 1', async () => {
      // From PostgreSQL 15 on, only the database's owner creates in the public schema: a role of its own, no grant.
      const admin = new pg.Client({ connectionString: POSTGRES.url });
      await admin.connect();
      try {
        await admin.query(
          "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'deadline_demo_reader') THEN CREATE ROLE deadline_demo_reader LOGIN; END IF; END $$",
        );
      } finally {
        await admin.end();
      }
      const url = new URL(POSTGRES.url);
      url.username = 'deadline_demo_reader';
      url.password = '';
      const cwd = await mkdtemp(join(scratch, 'run-'));
      const { code, stderr } = await runDemo({ DATABASE_URL: url.toString(), INIT_CWD: cwd });
      expect(code).toBe(1);
      expect(lastWords(stderr)).toMatch(
        /^demo: failed at "starting the chain \(gateway → orders → inventory\)": error: permission denied for schema public \[42501\] \(stack: .*demo-error\.log\)$/,
      );
      expect(await readFile(join(cwd, 'demo-error.log'), 'utf8')).toMatch(
        /permission denied for schema public\n\s+at /,
      );
    }, 60_000);
  },
);

describe('the copy of the binaries another account runs (running as root from a private directory)', () => {
  it('is readable and runnable by anyone, with the symlinks the package lists even where its script did not run', async () => {
    // A package tree as npm may leave it: owner-only modes, and the listed symlinks not made.
    const from = join(scratch, 'package', 'native');
    await mkdir(join(from, 'bin'), { recursive: true });
    await mkdir(join(from, 'lib'));
    await writeFile(join(from, 'bin', 'postgres'), '#!/bin/sh\n');
    await chmod(join(from, 'bin', 'postgres'), 0o700);
    await writeFile(join(from, 'lib', 'libicuuc.so.60.2'), '');
    await chmod(join(from, 'lib', 'libicuuc.so.60.2'), 0o600);
    await writeFile(
      join(from, 'pg-symlinks.json'),
      JSON.stringify([
        { source: 'native/lib/libicuuc.so.60.2', target: 'native/lib/libicuuc.so.60' },
        { source: 'native/lib/libicuuc.so.60.2', target: 'native/../../outside' },
        { nonsense: true },
      ]),
    );
    await mkdir(join(scratch, 'run'));
    const into = join(scratch, 'run', 'pg');
    await stageTree(from, into);
    const mode = async (path: string) => (await lstat(join(into, path))).mode & 0o777;
    expect(await mode('.')).toBe(0o755);
    expect(await mode('bin')).toBe(0o755);
    expect(await mode('bin/postgres')).toBe(0o755);
    expect(await mode('lib/libicuuc.so.60.2')).toBe(0o644);
    expect(await readlink(join(into, 'lib', 'libicuuc.so.60'))).toBe('libicuuc.so.60.2');
    // An entry pointing out of the copy (here: to scratch/outside) is ignored, not followed.
    expect(existsSync(join(scratch, 'outside'))).toBe(false);
    expect((await readdir(join(into, 'lib'))).sort()).toEqual(['libicuuc.so.60', 'libicuuc.so.60.2']);
  });
});
