/**
 * The Redis conformance suite (suite.ts) on node-redis 5, in RESP2: node-redis 5 marks RESP3 "unstable" (some replies
 * need `unstableResp3`); node-redis 6 runs the suite in RESP3 too.
 */
import { NODE_REDIS_5 } from './drivers.ts';
import { describeRedisConformance } from './suite.ts';

describeRedisConformance(NODE_REDIS_5);
