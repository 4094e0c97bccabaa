/**
 * Faults on a NATS server of this file's own (the shared one serves other files): a wrapped connection through a
 * server killed and restarted. Nothing reaches the process (no uncaught error, no unhandled rejection); a request
 * in flight, or made while the server is down, ends at its deadline with the typed error; after the restart the
 * connection serves again (its reply inbox is subscribed again by the client); every message JetStream
 * acknowledged before the kill is there after it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { currentContext, DeadlineExceededError } from '@deadline/core';
import { AckPolicy, type JsMsg, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../../test/support/free-port.ts';
import { expectEachTestLives } from '../../../test/support/process-watch.ts';
import { withDeadline, withJetStreamContext, withTrace } from '../src/index.ts';
import { connectNats, inRequest, signal, TRACE_ID } from './support.ts';

const BINARY = '/usr/sbin/nats-server';
const present = existsSync(BINARY);
if (!present) {
  const message = `nats-server is not installed at ${BINARY} (apt-get install nats-server)`;
  if (process.env.CI) throw new Error(message);
  console.warn(`skipped: ${message}`);
}

/** A nats-server with JetStream, on `port`, storing in `dir`; resolves once it says it is ready. */
function startServer(port: number, dir: string): Promise<ChildProcess> {
  const child = spawn(BINARY, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    let log = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      log += chunk.toString();
      if (log.includes('Server is ready')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`nats-server exited (${code}): ${log}`)));
    child.once('error', reject);
  });
}

function kill(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/** Resolves at the connection's next status event of `type` (`disconnect`, `reconnect`). */
async function nextStatus(nc: NatsConnection, type: string): Promise<void> {
  for await (const status of nc.status()) if (status.type === type) return;
}

describe.runIf(present)('a private NATS server killed and restarted', () => {
  expectEachTestLives();
  let dir: string;
  let port: number;
  let server: ChildProcess;
  let nc: NatsConnection;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'deadline-nats-'));
    port = await freePort();
    server = await startServer(port, dir);
    nc = await connectNats(`nats://127.0.0.1:${port}`);
  });
  afterAll(async () => {
    await nc?.close().catch(() => {});
    if (server !== undefined) await kill(server);
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('loses no acknowledged JetStream message, and a request through the outage ends at its deadline', async () => {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'RESTART', subjects: ['work.>'] });
    const js = withTrace(jetstream(nc));
    const acked: number[] = [];
    for (let i = 0; i < 20; i++) acked.push((await inRequest(2_000, () => js.publish('work.restart', String(i)))).seq);

    // A responder whose answer will not come before the kill, on a wrapped connection.
    const bus = withDeadline(nc, { serviceName: 'restart' });
    const arrived = signal();
    bus.subscribe('rpc.restart', {
      callback: (_error, msg) => {
        if (msg.string() === 'hang') arrived.resolve();
        else msg.respond('pong');
      },
    });
    await nc.flush();
    const started = performance.now();
    const inFlight = inRequest(1_500, () => bus.request('rpc.restart', 'hang')).catch((e: unknown) => e);
    await arrived.promise;
    const disconnected = nextStatus(nc, 'disconnect');
    await kill(server);
    await disconnected;
    // Made while the server is down: the client buffers it, the deadline bounds it.
    const during = await inRequest(300, () => bus.request('rpc.restart', 'ping')).catch((e: unknown) => e);
    expect(during).toBeInstanceOf(DeadlineExceededError);
    expect(await inFlight).toBeInstanceOf(DeadlineExceededError);
    expect(performance.now() - started).toBeLessThan(5_000);

    const reconnected = nextStatus(nc, 'reconnect');
    server = await startServer(port, dir);
    await reconnected;
    // Serving again: the request and its reply inbox both came back with the connection.
    expect((await inRequest(5_000, () => bus.request('rpc.restart', 'ping'))).string()).toBe('pong');

    const info = await jsm.streams.info('RESTART');
    expect(info.state.messages).toBe(20);
    await jsm.consumers.add('RESTART', { durable_name: 'reader', ack_policy: AckPolicy.Explicit });
    const consumer = await jetstream(nc).consumers.get('RESTART', 'reader');
    const read: number[] = [];
    const traces = new Set<string | undefined>();
    const process = withJetStreamContext(async (msg: JsMsg) => {
      read.push(msg.seq);
      traces.add(currentContext()?.trace?.traceId);
      msg.ack();
    });
    const batch = await consumer.fetch({ max_messages: 20, expires: 5_000 });
    for await (const msg of batch) {
      await process(msg);
      if (read.length === 20) break;
    }
    expect(read).toEqual(acked);
    expect([...traces]).toEqual([TRACE_ID]);
  });
});
