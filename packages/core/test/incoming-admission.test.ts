/**
 * Admission at an RPC server (`IncomingCall` with the `admission` option, which gRPC and Connect take): a unary call
 * that cannot finish is refused before its handler runs — `shed` when the server is overloaded, this hop's deadline
 * when less is left than its method's fastest typical time — and published and logged as refused; streaming calls,
 * messages and exempt calls are never judged; urgency counts only from trusted callers; an admitted call teaches its
 * method at its end. On this process's real event loop, kept busy on purpose where a test needs a queue; the adapters'
 * tests run it on real servers.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spin, untilLoopIdle } from '../../../test/support/busy-loop.ts';
import { type AdmissionRefusedMessage, DeadlineExceededError, DiagnosticsChannel } from '../src/index.ts';
import {
  type Admission,
  IncomingCall,
  type IncomingCallInit,
  LOADED_MS,
  loopDelayMs,
  type RpcServerOptions,
  resolveIncomingOptions,
} from '../src/internal.ts';
import { createBudgetParser } from '../src/wire.ts';

interface Call {
  internal: boolean;
  health?: boolean;
}

const METHOD = '/inventory.Inventory/Reserve';
const parser = createBudgetParser();

/** A service of `options` with admission on, its method taught that its calls take 50 ms. */
function service(options: RpcServerOptions<Call> = {}) {
  const lines: { level: string; line: Record<string, unknown>; message: string }[] = [];
  const logger = {
    info: (line: object, message: string) => lines.push({ level: 'info', line: line as never, message }),
    warn: (line: object, message: string) => lines.push({ level: 'warn', line: line as never, message }),
  };
  const resolved = resolveIncomingOptions<Call>({ serviceName: 'inventory', admission: true, logger, ...options });
  const engine = resolved.admission?.engine as Admission;
  const route = engine.route(METHOD);
  for (let i = 0; i < 50; i++) {
    route.enter();
    route.leave(50, true, false);
  }
  const start = (init: Partial<IncomingCallInit<Call>> & { headers?: Record<string, string> }) =>
    new IncomingCall<Call>(
      {
        call: { internal: false },
        method: METHOD,
        protocol: 'grpc',
        ownMs: Number.POSITIVE_INFINITY,
        ...init,
        headers: init.headers ?? {},
      },
      resolved,
      parser,
    );
  return { start, route, lines };
}

const refusals: AdmissionRefusedMessage[] = [];
const onRefused = (message: unknown) => refusals.push(message as AdmissionRefusedMessage);
beforeEach(() => {
  refusals.length = 0;
  diagnostics.subscribe(DiagnosticsChannel.AdmissionRefused, onRefused);
});
afterEach(() => {
  diagnostics.unsubscribe(DiagnosticsChannel.AdmissionRefused, onRefused);
});

describe('admission of an RPC call', () => {
  it('is off unless asked: a loaded server runs every call', async () => {
    const resolved = resolveIncomingOptions<Call>({ serviceName: 'inventory' });
    expect(resolved.admission).toBeUndefined();
    spin(100);
    const call = new IncomingCall<Call>(
      { call: { internal: false }, method: METHOD, protocol: 'grpc', ownMs: 20, headers: {} },
      resolved,
      parser,
    );
    expect(call.shed).toBeUndefined();
    expect(call.refusal).toBeUndefined();
  });

  it('a loaded server sheds a call that cannot cover the queue plus its method time: published, logged refused', async () => {
    const { start, lines } = service();
    await untilLoopIdle(loopDelayMs);
    spin(200);
    const call = start({ ownMs: 150 });
    expect(call.refusal).toBeUndefined();
    expect(call.shed).toMatchObject({ reason: 'overloaded', remainingMs: 150 });
    expect(call.shed?.queueMs).toBeGreaterThanOrEqual(150);
    expect(refusals).toEqual([
      expect.objectContaining({ protocol: 'grpc', hop: 'inventory', route: METHOD, reason: 'overloaded' }),
    ]);
    call.end(14);
    expect(lines).toEqual([
      {
        level: 'info',
        message: 'grpc call',
        line: expect.objectContaining({ method: METHOD, outcome: 'refused', refused: 'overloaded', code: 14 }),
      },
    ]);
    // With enough left for the queue and the method, let in.
    expect(start({ ownMs: 10_000 }).shed).toBeUndefined();
  });

  it('less left than the method fastest typical time is this hop deadline, loaded or not', async () => {
    const { start, route } = service();
    await untilLoopIdle(loopDelayMs);
    route.enter(); // one of its calls in flight: the estimate is not being tested by a probe
    const call = start({ ownMs: 20 });
    expect(call.shed).toBeUndefined();
    expect(call.refusal).toBeInstanceOf(DeadlineExceededError);
    expect(call.refusal).toMatchObject({ hop: 'inventory', phase: 'in-handler' });
    expect(call.refusal?.message).toMatch(/not started: 20 ms left, and its calls take at least 5\d ms/);
    expect(refusals).toEqual([expect.objectContaining({ reason: 'too-little-time', route: METHOD })]);
  });

  it('never judges a streaming call, a message, or an exempt call; a throwing exempt counts as exempt, and warns', async () => {
    const { start, lines } = service({
      admission: {
        exempt: (call) => {
          if (call.health === undefined) return false;
          if (call.health) return true;
          throw new Error('exempt broke');
        },
      },
    });
    await untilLoopIdle(loopDelayMs);
    spin(200);
    expect(start({ ownMs: 150 }).shed).toBeDefined();
    expect(start({ ownMs: 150, streaming: true }).shed).toBeUndefined();
    expect(start({ ownMs: 150, kind: 'message' }).shed).toBeUndefined();
    expect(start({ ownMs: 150, call: { internal: false, health: true } }).shed).toBeUndefined();
    expect(start({ ownMs: 150, call: { internal: false, health: false } }).shed).toBeUndefined();
    expect(lines).toEqual([
      {
        level: 'warn',
        message: 'admission.exempt threw',
        line: expect.objectContaining({ hop: 'inventory', method: METHOD, error: 'Error: exempt broke' }),
      },
    ]);
    expect(refusals).toHaveLength(1);
  });

  it('urgency (RFC 9218 priority) counts only from a trusted caller', async () => {
    const { start } = service({ trust: (call) => call.internal });
    await untilLoopIdle(loopDelayMs);
    spin(LOADED_MS * 5);
    const lowPriority = { headers: { priority: 'u=7' }, ownMs: 100_000 };
    expect(start(lowPriority).shed).toBeUndefined();
    expect(start({ ...lowPriority, call: { internal: true } }).shed).toMatchObject({ reason: 'low-priority' });
  });

  it('an admitted call teaches its method at its end; an error teaches nothing', async () => {
    const { start, route } = service();
    await untilLoopIdle(loopDelayMs);
    const before = route.time.estimate();
    const answered = start({ ownMs: 5_000 });
    expect(route.inFlight).toBe(1);
    answered.end(0);
    expect(route.inFlight).toBe(0);
    for (let i = 0; i < 200; i++) {
      const failed = start({ ownMs: 5_000 });
      spin(1);
      failed.end(13, new Error('handler broke'));
    }
    expect(route.inFlight).toBe(0);
    // 200 errors after ~1 ms each would have pulled a 50 ms estimate down; they are left out.
    expect(route.time.estimate()).toBeGreaterThanOrEqual((before as number) * 0.9);
  });
});
