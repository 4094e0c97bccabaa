/** The fault suite (faults.ts) on ioredis 5. */
import { IOREDIS_5 } from './drivers.ts';
import { describeFaults } from './faults.ts';

describeFaults(IOREDIS_5);
