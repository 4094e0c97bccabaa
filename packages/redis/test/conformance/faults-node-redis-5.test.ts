/** The fault suite (faults.ts) on node-redis 5. */
import { NODE_REDIS_5 } from './drivers.ts';
import { describeFaults } from './faults.ts';

describeFaults(NODE_REDIS_5);
