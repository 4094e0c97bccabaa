/** The Redis conformance suite (suite.ts) on ioredis 5. */
import { IOREDIS_5 } from './drivers.ts';
import { describeRedisConformance } from './suite.ts';

describeRedisConformance(IOREDIS_5);
