import { storeConformance } from './store-conformance.js';

await storeConformance('redis');
await storeConformance('node-redis');
