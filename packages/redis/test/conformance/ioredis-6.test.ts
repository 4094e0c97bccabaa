/** The Redis conformance suite (suite.ts) on ioredis 6. */
import { IOREDIS_6 } from './drivers.ts';
import { describeRedisConformance } from './suite.ts';

describeRedisConformance(IOREDIS_6);
describeRedisConformance(IOREDIS_6, { resp: 2 });
