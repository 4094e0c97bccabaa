/** The exactness suite (exactness.ts) on ioredis 5. */
import { IOREDIS_5 } from './drivers.ts';
import { describeExactness } from './exactness.ts';

describeExactness(IOREDIS_5);
