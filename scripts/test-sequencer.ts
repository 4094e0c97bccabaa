/**
 * Orders the test files longest first, so that the minute-long files start at once beside the rest instead of
 * running alone at the end: on 2 cores a run lasts at least as long as its longest file plus whatever starts
 * after it. Vitest's own order needs the durations of earlier runs, which a clean clone (CI) never has; without
 * them it runs a project's files one after another, largest first, which left the soak's minute for last and put
 * a package's files that share a server lock side by side, waiting on each other.
 *
 * The expected times are in test-durations.json, from a run on this machine (`node scripts/test-durations.mjs
 * <vitest json report>` writes it); a file not listed there counts as short, and size breaks ties. The order is
 * only a schedule: no test depends on it.
 */
import { readFileSync, statSync } from 'node:fs';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

const repo = fileURLToPath(new URL('..', import.meta.url));
const expectedSeconds: Record<string, number> = JSON.parse(
  readFileSync(new URL('./test-durations.json', import.meta.url), 'utf8'),
);

function expectedOf(spec: TestSpecification): number {
  return expectedSeconds[relative(repo, spec.moduleId)] ?? 0;
}

function sizeOf(spec: TestSpecification): number {
  try {
    return statSync(spec.moduleId).size;
  } catch {
    return 0;
  }
}

export default class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const keyed = files.map((spec) => ({
      spec,
      group: spec.project.config.sequence.groupOrder ?? 0,
      seconds: expectedOf(spec),
      size: sizeOf(spec),
    }));
    keyed.sort((a, b) => a.group - b.group || b.seconds - a.seconds || b.size - a.size);
    return keyed.map(({ spec }) => spec);
  }
}
