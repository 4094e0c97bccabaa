/**
 * installGlobalDispatcher() when the global dispatcher is Node's own (its bundled undici: 6 on Node 20 and 22, 7
 * on 24, 8 on 26), as it is once the app made a global fetch() — or on Node 22 once `node:http` is loaded: the
 * calls still carry their budget and are cut at the deadline. In a process of its own, where nothing imported
 * undici before that first fetch.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const fixture = fileURLToPath(new URL('./fixtures/node-global-dispatcher.mjs', import.meta.url));
const sourceHooks = fileURLToPath(new URL('../../../test/support/source-hooks.mjs', import.meta.url));

/**
 * How long the process may take: it loads the packages from their TypeScript sources, compiled as they are imported
 * (2 to 3 s on a quiet machine, several times that with both cores busy).
 */
const PROCESS_MS = 60_000;

it(
  `over Node's own global dispatcher (undici ${process.versions.undici}): budget sent, cut at the deadline`,
  async () => {
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ['--conditions=@deadline/source', '--import', sourceHooks, fixture],
      { timeout: PROCESS_MS },
    );
    expect(stderr).toBe('');
    const result = JSON.parse(stdout);
    expect(result).toMatchObject({
      nodeOwn: true,
      silent: 'DeadlineExceededError',
      outside: 'no budget',
      uninstalled: true,
    });
    // What was left of 2 s when the call was sent: at most its length below (a few ms, unless the machine is busy).
    expect(Number(result.budget)).toBeGreaterThanOrEqual(2_000 - result.budgetCallMs - 1);
    expect(Number(result.budget)).toBeLessThanOrEqual(2_000);
    expect(result.silentMs).toBeGreaterThanOrEqual(195);
    expect(result.silentMs).toBeLessThan(1_500);
  },
  PROCESS_MS + 10_000,
);
