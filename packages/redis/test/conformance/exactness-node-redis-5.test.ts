/**
 * The exactness suite's lane test (exactness.ts) on node-redis 5; its timers and releases are the same code as on
 * node-redis 6, which runs every test.
 */
import { NODE_REDIS_5 } from './drivers.ts';
import { describeExactness } from './exactness.ts';

describeExactness(NODE_REDIS_5, 'lane');
