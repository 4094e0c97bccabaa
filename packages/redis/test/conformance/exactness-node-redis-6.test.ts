/** The exactness suite (exactness.ts) on node-redis 6. */
import { NODE_REDIS_6 } from './drivers.ts';
import { describeExactness } from './exactness.ts';

describeExactness(NODE_REDIS_6);
