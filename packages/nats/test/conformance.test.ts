/**
 * The messaging conformance suite (test/support/messaging-conformance.ts) on the real NATS server: subjects of this
 * run, services on connections wrapped by `withDeadline()`, and plain connections for what a client without the
 * library sends and sees.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type Msg, type MsgHdrs, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { describe } from 'vitest';
import { messagingConformance, type RawReply } from '../../../test/support/messaging-conformance.ts';
import { NATS, POSTGRES, requireService } from '../../../test/support/services.ts';
import { withDeadline } from '../src/index.ts';
import { connectNats, runPrefix } from './support.ts';

const available = (await requireService(NATS)) && (await requireService(POSTGRES));
const RUN = runPrefix('conformance');

/** A message's headers as text, names in lower case (what the suite compares). */
function textHeaders(headers: MsgHdrs | undefined): Record<string, string> {
  const text: Record<string, string> = {};
  for (const name of headers?.keys() ?? []) text[name.toLowerCase()] = headers?.get(name) ?? '';
  return text;
}

describe.runIf(available)('NATS', () => {
  messagingConformance('@deadline/nats', async () => {
    const connections: NatsConnection[] = [];
    const open = async () => {
      const nc = await connectNats();
      connections.push(nc);
      return nc;
    };
    const plain = await open();
    const client = withDeadline(await open());
    return {
      driver: {
        protocol: 'nats',
        async destination(name) {
          return `${RUN}.${name}`;
        },
        async serve(subject, options, handler) {
          const nc = await open();
          const service = withDeadline(nc, options);
          const subscription = service.subscribe(subject, {
            callback: async (_error, msg: Msg) => {
              await handler({ text: msg.string(), respond: (text) => msg.respond(text) });
            },
          });
          await nc.flush();
          return async () => {
            subscription.unsubscribe();
            await nc.flush();
          };
        },
        async request(subject, text) {
          return (await client.request(subject, text)).string();
        },
        async publishEvent(subject, text) {
          client.publish(subject, text);
          await client.connection.flush();
        },
        async rawRequest(subject, headers): Promise<RawReply> {
          const h = natsHeaders();
          for (const [name, value] of Object.entries(headers)) h.set(name, value);
          const reply = await plain.request(subject, 'raw', { headers: h, timeout: 10_000 });
          return { text: reply.string(), headers: textHeaders(reply.headers) };
        },
        async rawNext(subject) {
          let resolve!: (headers: Record<string, string>) => void;
          const headers = new Promise<Record<string, string>>((r) => {
            resolve = r;
          });
          plain.subscribe(subject, { max: 1, callback: (_error, msg) => resolve(textHeaders(msg.headers)) });
          await plain.flush();
          return { headers };
        },
        async rawResponder(subject, delayMs) {
          const answering = new Set<Promise<void>>();
          const subscription = plain.subscribe(subject, {
            callback: (_error, msg) => {
              const answer = sleep(delayMs).then(() => {
                msg.respond('late');
              });
              answering.add(answer);
              answer.finally(() => answering.delete(answer));
            },
          });
          await plain.flush();
          return async () => {
            // Its answers still to go go first.
            await Promise.all(answering);
            subscription.unsubscribe();
          };
        },
      },
      async close() {
        for (const nc of connections) await nc.close();
      },
    };
  });
});
