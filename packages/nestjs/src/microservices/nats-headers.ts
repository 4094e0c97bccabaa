/**
 * NATS message headers, made by the NATS client the app installed: `@nats-io/transport-node` (NestJS 12's) or `nats`
 * 2.x (NestJS 11's). Nest's NATS client publishes a record's headers as they are (`headers.encode()`, the same in
 * both), so either library's headers do; neither is loaded until a NATS client sends.
 */
import { createRequire } from 'node:module';

interface NatsHeaders {
  set(name: string, value: string): void;
}

const require = createRequire(import.meta.url);
let make: (() => NatsHeaders) | undefined;

/** New, empty NATS headers; throws naming the two packages when neither is installed. */
export function newNatsHeaders(): NatsHeaders {
  make ??= loadHeaders();
  return make();
}

function loadHeaders(): () => NatsHeaders {
  for (const name of ['@nats-io/transport-node', 'nats']) {
    try {
      const library = require(name) as { headers?: () => NatsHeaders };
      if (typeof library.headers === 'function') return library.headers;
    } catch {
      // Not installed: try the other.
    }
  }
  throw new Error('@deadline/nestjs: a NATS client needs @nats-io/transport-node (NestJS 12) or nats (NestJS 11)');
}
