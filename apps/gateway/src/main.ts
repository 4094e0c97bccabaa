/** `npm run start -w apps/gateway`: the gateway alone. ORDERS_URL (required), PORT is ephemeral. */
import { deadlineMixin, logCalls } from '@deadline/pino';
import pino from 'pino';
import { startGateway } from './service.js';

const logger = pino({ mixin: deadlineMixin() });
logCalls(logger);
const ordersUrl = process.env.ORDERS_URL;
if (ordersUrl === undefined) throw new Error('set ORDERS_URL (start orders first: npm run start -w apps/orders)');
const gateway = await startGateway({ port: Number(process.env.PORT ?? 0), ordersUrl, logger });
logger.info({ url: gateway.url }, 'gateway listening');
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void gateway.close());
