/**
 * Lets a plain Node process load the packages from their TypeScript sources, as vitest does: run it with
 * `node --conditions=@deadline/source --import <this file> script.mjs`. The "@deadline/source" condition
 * points `@deadline/*` at `src/*.ts`; these hooks find a source's `./x.js` imports as `./x.ts` and strip the
 * types (TypeScript's transpileModule: no type checking). Node 20 cannot strip types by itself. Used by tests
 * that need a fresh process running the sources (packages/pg/test/faults.test.ts, packages/http/test/
 * node-dispatcher.test.ts).
 *
 * Where Node has `module.registerHooks()` (22.15 and later) the hooks run in the loading thread, synchronously;
 * `module.register()`, the only way on Node 20, is deprecated from Node 26 (DEP0205, a warning on stderr).
 */
import { readFileSync } from 'node:fs';
import module from 'node:module';
import { isMainThread } from 'node:worker_threads';

const require = module.createRequire(import.meta.url);
let ts;

/** The ES module a `.ts` file compiles to. */
function compiled(url) {
  ts ??= require('typescript');
  return ts.transpileModule(readFileSync(new URL(url), 'utf8'), {
    fileName: url,
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true },
  }).outputText;
}

/** What a `./x.js` import in a TypeScript source names when there is no such file: `./x.ts`. */
function typeScriptTwin(specifier, context) {
  return context.parentURL?.endsWith('.ts') && specifier.endsWith('.js') ? `${specifier.slice(0, -3)}.ts` : undefined;
}

function resolveSync(specifier, context, nextResolve) {
  try {
    return nextResolve(specifier, context);
  } catch (error) {
    const twin = typeScriptTwin(specifier, context);
    if (twin === undefined) throw error;
    return nextResolve(twin, context);
  }
}

/** A `.ts` file is loaded as the ES module it compiles to (the same for both forms: `nextLoad` is only passed on). */
export function load(url, context, nextLoad) {
  if (!url.endsWith('.ts')) return nextLoad(url, context);
  return { format: 'module', source: compiled(url), shortCircuit: true };
}

/** The asynchronous form, for module.register() (whose hooks run on a thread of their own, loading this file). */
export async function resolve(specifier, context, nextResolve) {
  try {
    return await nextResolve(specifier, context);
  } catch (error) {
    const twin = typeScriptTwin(specifier, context);
    if (twin === undefined) throw error;
    return nextResolve(twin, context);
  }
}

// Loaded by --import, on the main thread: install the hooks.
if (isMainThread) {
  if (typeof module.registerHooks === 'function') module.registerHooks({ resolve: resolveSync, load });
  else module.register(import.meta.url);
}
