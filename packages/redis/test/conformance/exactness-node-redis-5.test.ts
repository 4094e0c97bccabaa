/** The exactness suite (exactness.ts) on node-redis 5. */
import { NODE_REDIS_5 } from './drivers.ts';
import { describeExactness } from './exactness.ts';

describeExactness(NODE_REDIS_5);
