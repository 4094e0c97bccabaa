/** The exactness suite (exactness.ts) on ioredis 6, on the shared server (ioredis 5 runs the `hz 1` rounds). */
import { IOREDIS_6 } from './drivers.ts';
import { describeExactness } from './exactness.ts';

describeExactness(IOREDIS_6, 'shared');
