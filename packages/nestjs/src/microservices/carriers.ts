/**
 * Where each Nest transport carries a message's budget and trace — the same headers as HTTP's (`x-request-deadline`,
 * `traceparent`), so that any consumer, Nest or not, reads them:
 *
 * - NATS: the message's headers (a `NatsRecord`; the app's own record keeps its data and headers). A request also
 *   carries its deadline on the publisher's wall clock (`x-request-deadline-at`), here and on RabbitMQ, for the
 *   consumer to take the time it waited in the queue off its budget.
 * - RabbitMQ: the message's AMQP headers (an `RmqRecord`), and for a request also its per-message `expiration`, so that
 *   the broker drops a request nobody waits for any more instead of handing it to a consumer.
 * - Redis and TCP (NestJS 12): the packet's metadata, set by the client's dispatch hook; NestJS 11's packets have
 *   none, so nothing is carried there.
 * - Others (MQTT, Kafka): nothing is carried; the caller's wait is still bounded.
 */
import { formatDeadlineAt, REQUEST_DEADLINE_AT_HEADER } from '@deadline/core/wire';
import { ClientNats, ClientRMQ, NatsRecord, RmqRecord } from '@nestjs/microservices';
import { newNatsHeaders } from './nats-headers.js';

/** What a message carries: headers to send, and for a request its timeout. */
export interface Carried {
  headers: Record<string, string>;
  timeoutMs: number | undefined;
}

/** A packet's data with what it carries, until the client's dispatch hook moves that to the packet's metadata. */
export class WithMetadata {
  constructor(
    readonly data: unknown,
    readonly headers: Record<string, string>,
  ) {}
}

type DispatchHook = (packet: { data: unknown; metadata?: Record<string, string> }) => void;

/** A client that can carry metadata on its packets (NestJS 12's dispatch hook). */
interface DispatchHooks {
  setOnDispatchHook?(hook: DispatchHook): void;
  onDispatchHook?: DispatchHook | undefined;
}

/** `data` as the client's transport sends it with `carried`. */
export function carry(client: object, data: unknown, carried: Carried): unknown {
  if (client instanceof ClientNats) return natsRecord(data, withDeadlineAt(carried));
  if (client instanceof ClientRMQ) return rmqRecord(data, withDeadlineAt(carried));
  if (carriesMetadata(client)) return new WithMetadata(data, carried.headers);
  return data;
}

/**
 * A broker's request also carries its deadline on this host's wall clock, for its consumer to learn how long it waited
 * in the queue (`@deadline/core/wire`'s `waitedMs()`).
 */
function withDeadlineAt(carried: Carried): Carried {
  const { timeoutMs } = carried;
  if (timeoutMs === undefined) return carried;
  return { ...carried, headers: { ...carried.headers, [REQUEST_DEADLINE_AT_HEADER]: formatDeadlineAt(timeoutMs) } };
}

function natsRecord(data: unknown, { headers }: Carried): NatsRecord {
  const record = data instanceof NatsRecord ? data : new NatsRecord(data, undefined);
  const natsHeaders = (record.headers as { set(name: string, value: string): void } | undefined) ?? newNatsHeaders();
  for (const [name, value] of Object.entries(headers)) natsHeaders.set(name, value);
  return new NatsRecord(record.data, natsHeaders);
}

function rmqRecord(data: unknown, { headers, timeoutMs }: Carried): RmqRecord {
  const record = data instanceof RmqRecord ? data : new RmqRecord(data, undefined);
  const options = record.options ?? {};
  return new RmqRecord(record.data, {
    ...options,
    headers: { ...options.headers, ...headers },
    // The app's own expiration, if shorter, stands.
    ...(timeoutMs === undefined || Number(options.expiration) <= timeoutMs ? {} : { expiration: String(timeoutMs) }),
  });
}

const ourHooks = new WeakMap<object, DispatchHook>();

/**
 * Whether the client's packets carry metadata (NestJS 12). Its dispatch hook then moves a {@link WithMetadata}'s
 * headers there, before the app's own hook runs — set again if the app replaced it since (a hook it sets later
 * replaces ours, and the wrapper would then be sent as the data).
 */
function carriesMetadata(client: object): boolean {
  const hooks = client as DispatchHooks;
  if (typeof hooks.setOnDispatchHook !== 'function') return false;
  const current = hooks.onDispatchHook;
  if (current !== undefined && current === ourHooks.get(client)) return true;
  const hook: DispatchHook = (packet) => {
    if (packet.data instanceof WithMetadata) {
      const { data, headers } = packet.data;
      packet.data = data;
      packet.metadata = { ...packet.metadata, ...headers };
    }
    current?.(packet);
  };
  ourHooks.set(client, hook);
  hooks.setOnDispatchHook(hook);
  return true;
}
