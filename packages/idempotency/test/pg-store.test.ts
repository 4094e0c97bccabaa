import { storeConformance } from './store-conformance.js';

await storeConformance('pg');
