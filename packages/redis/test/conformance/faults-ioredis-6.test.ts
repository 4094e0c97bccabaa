/** The fault suite (faults.ts) on ioredis 6. */
import { IOREDIS_6 } from './drivers.ts';
import { describeFaults } from './faults.ts';

describeFaults(IOREDIS_6);
