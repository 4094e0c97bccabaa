/** The fault suite (faults.ts) on node-redis 6. */
import { NODE_REDIS_6 } from './drivers.ts';
import { describeFaults } from './faults.ts';

describeFaults(NODE_REDIS_6);
