/** The Redis conformance suite (suite.ts) on node-redis 6 (RESP2 and RESP3). */
import { NODE_REDIS_6 } from './drivers.ts';
import { describeRedisConformance } from './suite.ts';

describeRedisConformance(NODE_REDIS_6);
describeRedisConformance(NODE_REDIS_6, { resp: 3 });
