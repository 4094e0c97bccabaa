/**
 * A vitest reporter that turns "ran nothing" into a failure: a project whose include pattern matches no file,
 * or a test file that declares no test, fails the run. Vitest alone passes a project that silently finds zero.
 */
import type { Reporter, TestModule, Vitest } from 'vitest/node';

export default class RequireTestsReporter implements Reporter {
  #vitest: Vitest | undefined;

  onInit(vitest: Vitest): void {
    this.#vitest = vitest;
  }

  async onTestRunEnd(testModules: ReadonlyArray<TestModule>): Promise<void> {
    const problems: string[] = [];
    for (const project of this.#vitest?.projects ?? []) {
      const { testFiles } = await project.globTestFiles();
      if (testFiles.length === 0) problems.push(`project "${project.name}" matches no test files`);
    }
    for (const module of testModules) {
      if (module.state() === 'skipped') continue;
      let count = 0;
      for (const _ of module.children.allTests()) count++;
      if (count === 0) problems.push(`${module.moduleId} declares no tests`);
    }
    if (problems.length > 0) {
      process.exitCode = 1;
      throw new Error(`A run that tests nothing must not pass:\n  - ${problems.join('\n  - ')}`);
    }
  }
}
