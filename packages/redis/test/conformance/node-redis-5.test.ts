/** The Redis conformance suite (suite.ts) on node-redis 5 (RESP2 and RESP3). */
import { NODE_REDIS_5 } from './drivers.ts';
import { describeRedisConformance } from './suite.ts';

describeRedisConformance(NODE_REDIS_5);
describeRedisConformance(NODE_REDIS_5, { resp: 3 });
