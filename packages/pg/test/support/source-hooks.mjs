/**
 * Lets a plain Node process load the packages from their TypeScript sources, as vitest does: run it with
 * `node --conditions=@deadline/source --import <this file> script.mjs`. The "@deadline/source" condition
 * points `@deadline/*` at `src/*.ts`; these hooks find a source's `./x.js` imports as `./x.ts` and strip the
 * types (TypeScript's transpileModule: no type checking). Node 20 cannot strip types by itself.
 */
import { readFile } from 'node:fs/promises';
import { register } from 'node:module';
import { isMainThread } from 'node:worker_threads';

// Loaded by --import, on the main thread: register this same file as the hooks (run on their own thread).
if (isMainThread) register(import.meta.url);

/** A `./x.js` import in a TypeScript source names `./x.ts`. */
export async function resolve(specifier, context, nextResolve) {
  try {
    return await nextResolve(specifier, context);
  } catch (error) {
    if (!context.parentURL?.endsWith('.ts') || !specifier.endsWith('.js')) throw error;
    return nextResolve(`${specifier.slice(0, -3)}.ts`, context);
  }
}

let ts;

/** A `.ts` file is loaded as the ES module it compiles to. */
export async function load(url, context, nextLoad) {
  if (!url.endsWith('.ts')) return nextLoad(url, context);
  ts ??= (await import('typescript')).default;
  const { outputText } = ts.transpileModule(await readFile(new URL(url), 'utf8'), {
    fileName: url,
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true },
  });
  return { format: 'module', source: outputText, shortCircuit: true };
}
