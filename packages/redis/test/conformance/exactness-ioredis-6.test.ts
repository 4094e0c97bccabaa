/** The exactness suite (exactness.ts) on ioredis 6. */
import { IOREDIS_6 } from './drivers.ts';
import { describeExactness } from './exactness.ts';

describeExactness(IOREDIS_6);
