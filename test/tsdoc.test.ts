/**
 * Docs are part of the API: every export of every package's public entry carries TSDoc with an example.
 * Checked with the TypeScript compiler, so a new export without one fails the suite.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { expect, it } from 'vitest';

const repo = fileURLToPath(new URL('..', import.meta.url));
/** Every public entry point's source (the exports map's `@deadline/source`), but the adapter kits (`./internal`). */
const entries = readdirSync(join(repo, 'packages')).flatMap((dir) => {
  const manifest = JSON.parse(readFileSync(join(repo, 'packages', dir, 'package.json'), 'utf8'));
  return Object.entries<{ '@deadline/source'?: string }>(manifest.exports ?? {})
    .filter(([subpath, target]) => subpath !== './internal' && target['@deadline/source'] !== undefined)
    .map(([, target]) => join(repo, 'packages', dir, target['@deadline/source'] as string));
});

/**
 * One program for every entry: the packages share most of what they import (core, server, the frameworks' types),
 * which a program per entry parsed and bound again each time (~1.5 s an entry).
 */
let program: ts.Program | undefined;

function undocumented(entry: string): string[] {
  program ??= ts.createProgram(entries, {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(entry);
  if (source === undefined) throw new Error(`cannot read ${entry}`);
  const moduleSymbol = checker.getSymbolAtLocation(source);
  if (moduleSymbol === undefined) throw new Error(`${entry} has no exports`);
  const missing: string[] = [];
  for (const exported of checker.getExportsOfModule(moduleSymbol)) {
    const symbol = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
    const tags = symbol.getJsDocTags(checker);
    const hasDoc = symbol.getDocumentationComment(checker).length > 0;
    if (!hasDoc || !tags.some((tag) => tag.name === 'example')) missing.push(exported.getName());
  }
  return missing;
}

it.each(entries)('every export of %s has TSDoc with an @example', (entry) => {
  expect(undocumented(entry)).toEqual([]);
});
