/**
 * Which of Node's two AsyncLocalStorage implementations runs here: async_hooks (Node 20 and 22) or
 * AsyncContextFrame (the default from Node 24, behind `--experimental-async-context-frame` on 22, turned off by
 * `--no-async-context-frame`). `expected` comes from the version and flags, `found` from behaviour, so a test can
 * say which one it ran on and notice when Node changes.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

export type AlsImplementation = 'async_hooks' | 'AsyncContextFrame';

export function implementationHere(): { expected: AlsImplementation; found: AlsImplementation } {
  const flags = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)];
  const major = Number(process.versions.node.split('.')[0]);
  const frames =
    !flags.includes('--no-async-context-frame') &&
    (major >= 24 || flags.includes('--experimental-async-context-frame'));
  // The edge that tells them apart: async_hooks' exit() only switches the storage off, and a run() inside it
  // switches it back on, so the outer store shows again; AsyncContextFrame's exit() is run(undefined).
  const probe = new AsyncLocalStorage<string>();
  const after = probe.run('outer', () =>
    probe.exit(() => {
      probe.run('inner', () => {});
      return probe.getStore();
    }),
  );
  return {
    expected: frames ? 'AsyncContextFrame' : 'async_hooks',
    found: after === 'outer' ? 'async_hooks' : 'AsyncContextFrame',
  };
}
