/**
 * A copy of the PostgreSQL tree that any account can read and run: directories 755, programs 755, the rest 644,
 * whatever the modes and the directory around the original. A file that already has those modes is hard-linked
 * instead (nothing copied, nothing of the original changed); across file systems it is copied.
 *
 * The library symlinks the package lists in `pg-symlinks.json` (its install script makes them) are made here
 * too when missing, so the copy runs even if that script did not.
 */
import { chmod, copyFile, link, lstat, mkdir, readdir, readFile, readlink, symlink } from 'node:fs/promises';
import { basename, dirname, join, relative } from 'node:path';

export async function stageTree(from: string, into: string): Promise<void> {
  await copyDirectory(from, into);
  await makeListedSymlinks(from, into);
}

async function copyDirectory(from: string, into: string): Promise<void> {
  await mkdir(into);
  await chmod(into, 0o755);
  for (const entry of await readdir(from, { withFileTypes: true })) {
    const source = join(from, entry.name);
    const target = join(into, entry.name);
    if (entry.isDirectory()) await copyDirectory(source, target);
    else if (entry.isSymbolicLink()) await symlink(await readlink(source), target);
    else if (entry.isFile()) await copyFileOpen(source, target);
  }
}

async function copyFileOpen(source: string, target: string): Promise<void> {
  const { mode } = await lstat(source);
  // What is in bin/ is a program even if it came without its x bits (some unpackers drop them).
  const wanted = mode & 0o111 || basename(dirname(source)) === 'bin' ? 0o755 : 0o644;
  if ((mode & wanted) === wanted) {
    try {
      return await link(source, target);
    } catch {
      // Another file system (a tmpfs /tmp), or links refused: copy.
    }
  }
  await copyFile(source, target);
  await chmod(target, wanted);
}

/** `[{ source: 'native/lib/libpq.so.5.18', target: 'native/lib/libpq.so.5' }, …]`: paths from the package root. */
async function makeListedSymlinks(from: string, into: string): Promise<void> {
  let listed: unknown;
  try {
    listed = JSON.parse(await readFile(join(from, 'pg-symlinks.json'), 'utf8'));
  } catch {
    return; // No list (another platform's package): nothing to make.
  }
  if (!Array.isArray(listed)) return;
  const root = dirname(from);
  for (const item of listed as { source?: unknown; target?: unknown }[]) {
    if (typeof item?.source !== 'string' || typeof item.target !== 'string') continue;
    const source = join(into, relative(from, join(root, item.source)));
    const target = join(into, relative(from, join(root, item.target)));
    // Only inside the copy: a list that points elsewhere is ignored, not followed.
    if (!inside(into, source) || !inside(into, target) || (await exists(target))) continue;
    await symlink(relative(dirname(target), source), target);
  }
}

function inside(dir: string, path: string): boolean {
  const rel = relative(dir, path);
  return rel !== '' && !rel.startsWith('..') && !rel.startsWith('/');
}

async function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}
