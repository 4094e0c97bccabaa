/** What every scenario gets: the environment, the running chain, and whether to run the short version. */
import type { Chain } from '../chain.js';
import type { Answer } from '../client.js';
import type { Environment } from '../environment.js';

export interface ScenarioContext {
  env: Environment;
  chain: Chain;
  /** The short run of `npm test` (fewer rows, shorter waits). */
  quick: boolean;
  /** The chain's very first request (the first table's first row, asked before the warm-up), once made. */
  cold?: Answer | undefined;
}
