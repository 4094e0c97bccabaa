import { expect, it } from 'vitest';
import { runScenario } from '../src/scenario.ts';

it('the demo table has both rows, and propagation cuts the dead work', async () => {
  const [propagated, fixed] = await runScenario();
  expect(propagated?.mode).toBe('propagated deadline');
  expect(fixed?.mode).toBe('fixed 5 s timeout');
  // The downstream saw a budget below the client's (it was spent on the way), and none without propagation.
  expect(propagated?.downstreamBudgetMs).toBeGreaterThan(0);
  expect(propagated?.downstreamBudgetMs).toBeLessThanOrEqual(300);
  expect(fixed?.downstreamBudgetMs).toBeUndefined();
  expect(propagated?.downstreamOutcome).toBe('stopped');
  expect(fixed?.downstreamOutcome).toBe('finished');
  expect(propagated?.deadWorkMs).toBeLessThan(fixed?.deadWorkMs as number);
});
