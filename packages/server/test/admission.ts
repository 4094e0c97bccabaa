/**
 * Admission, as every server adapter must show it through a real listening server and a real HTTP client (undici):
 * under a burst that saturates the event loop, the requests that cannot finish are refused at arrival (503,
 * `Retry-After`, the hop named) without their handler running, and the ones let in are answered in time; on an
 * idle loop nothing is refused; long-lived and exempt requests never are; a trusted caller's RFC 9218 urgency
 * decides who is shed first; a request with less left than its route's fastest typical time gets the hop's 504.
 * The client shares the server's process: the burst blocks both, as a real overload would block the server.
 */
import diagnostics from 'node:diagnostics_channel';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { type AdmissionRefusedMessage, DiagnosticsChannel } from '@deadline/core';
import { DEADLINE_EXCEEDED_BY_HEADER, DEADLINE_REFUSED_BY_HEADER } from '@deadline/core/wire';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spin } from '../../../test/support/busy-loop.ts';
import { untilTrue } from '../../../test/support/turns.ts';
import type { OverloadedBody } from '../src/index.ts';
import { deadlineLines, type Harness, type Route, type Running } from './harness.ts';

const HOP = 'admitting';
/** CPU each /cpu request spends, synchronously: the event loop is the bottleneck. */
const CPU_MS = 40;

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  tookMs: number;
}

/**
 * Connections opened ahead, to write requests on all at once, from inside a handler that then keeps the loop busy:
 * they are all waiting when the loop comes back, as a burst from many clients would be. (undici in this process
 * opens its connections and writes its requests over several turns of the loop: its burst would arrive spread out.)
 */
export async function openConnections(url: string, count: number): Promise<Socket[]> {
  const { hostname, port } = new URL(url);
  return Promise.all(
    Array.from({ length: count }, async () => {
      const socket = connect(Number(port), hostname);
      await once(socket, 'connect');
      // One request answered first: the server has taken the connection in and reads it (else it would take it
      // in only after the busy stretch, and read its request a turn later).
      await new Promise<void>((resolve) => {
        let text = '';
        const onData = (chunk: Buffer) => {
          text += chunk.toString('utf8');
          const head = text.indexOf('\r\n\r\n');
          if (head === -1) return;
          const length = /content-length: *(\d+)/i.exec(text.slice(0, head));
          const complete = length ? text.length - head - 4 >= Number(length[1]) : text.endsWith('0\r\n\r\n');
          if (!complete) return;
          socket.off('data', onData);
          resolve();
        };
        socket.on('data', onData);
        socket.write('GET /ping HTTP/1.1\r\nhost: localhost\r\n\r\n');
      });
      return socket;
    }),
  );
}

/** Writes one request on `socket` now (`Connection: close`); resolves with its answer once the server closes. */
export function sendOn(socket: Socket, path: string, headers: Record<string, string>): Promise<Answer> {
  const startedAt = performance.now();
  const lines = [`GET ${path} HTTP/1.1`, 'host: localhost', 'connection: close'];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  const ended = once(socket, 'close').then(() => {
    const text = Buffer.concat(chunks).toString('utf8');
    const split = text.indexOf('\r\n\r\n');
    const [statusLine, ...headerLines] = text.slice(0, split).split('\r\n');
    const answerHeaders: Record<string, string> = {};
    for (const line of headerLines) {
      const colon = line.indexOf(':');
      answerHeaders[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
    }
    const body = text.slice(split + 4);
    // A chunked body: the JSON is the first chunk's.
    const json = answerHeaders['transfer-encoding'] === 'chunked' ? (body.split('\r\n')[1] ?? '') : body;
    return {
      status: Number(statusLine?.split(' ')[1]),
      headers: answerHeaders,
      body: json,
      tookMs: performance.now() - startedAt,
    };
  });
  socket.write(`${lines.join('\r\n')}\r\n\r\n`);
  return ended;
}

export function admissionSuite(harness: Harness): void {
  describe(`${harness.name}: admission`, () => {
    let server: Running;
    const agent = new Agent({ connections: 64, keepAliveTimeout: 10, keepAliveMaxTimeout: 10 });
    const runs = { cpu: 0, sleepy: 0, events: 0, health: 0 };
    /** When each /cpu handler finished, and when the last burst was written: the server's side of "in time". */
    const cpuDoneAt: number[] = [];
    let burstSentAt = 0;
    let releaseSleepy: (() => void) | undefined;
    const refusals: AdmissionRefusedMessage[] = [];
    const onRefused = (message: unknown) => refusals.push(message as AdmissionRefusedMessage);
    let duringBlock: (() => Promise<Answer[]>) | undefined;
    let during: Promise<Answer[]> | undefined;
    /**
     * Sends `requests` (path and headers each) on connections opened ahead, all at once, from inside a handler that
     * then keeps the loop busy for 300 ms: they arrive as a burst on a loop that has just been busy.
     */
    const whileBlocked = async (requests: [string, Record<string, string>][]): Promise<Answer[]> => {
      const sockets = await openConnections(server.url, requests.length);
      duringBlock = () => {
        burstSentAt = performance.now();
        return Promise.all(requests.map(([path, headers], i) => sendOn(sockets[i] as Socket, path, headers)));
      };
      try {
        expect((await get('/block', { 'x-request-deadline': '5000' })).status).toBe(200);
        return await (during as Promise<Answer[]>);
      } finally {
        duringBlock = undefined;
        during = undefined;
        for (const socket of sockets) socket.destroy();
      }
    };

    const routes: Route[] = [
      {
        method: 'GET',
        path: '/cpu',
        handler: async (io) => {
          runs.cpu++;
          spin(CPU_MS);
          cpuDoneAt.push(performance.now());
          io.reply(200, { ok: true });
        },
      },
      {
        method: 'GET',
        path: '/sleepy',
        handler: async (io) => {
          runs.sleepy++;
          // Held open when a test asks (one of the route's requests in flight), else a 50 ms wait.
          await new Promise<void>((resolve) => {
            if (releaseSleepy !== undefined) {
              const previous = releaseSleepy;
              releaseSleepy = () => {
                previous();
                resolve();
              };
            } else setTimeout(resolve, 50);
          });
          io.reply(200, { ok: true });
        },
      },
      {
        method: 'GET',
        path: '/block',
        handler: async (io) => {
          // Whatever the test sends from here is written now and read once this stretch is over: it arrives on a
          // loop that has just been busy for 300 ms.
          during = duringBlock?.();
          spin(300);
          io.reply(200, { ok: true });
        },
      },
      {
        method: 'GET',
        path: '/ping',
        handler: async (io) => io.reply(200, {}),
      },
      {
        method: 'GET',
        path: '/health',
        handler: async (io) => {
          runs.health++;
          io.reply(200, { ok: true });
        },
      },
      {
        method: 'GET',
        path: '/long-poll',
        longLived: true,
        handler: async (io) => {
          runs.events++;
          io.reply(200, { ok: true });
        },
      },
    ];

    const get = async (path: string, headers: Record<string, string> = {}): Promise<Answer> => {
      const startedAt = performance.now();
      const response = await request(`${server.url}${path}`, { dispatcher: agent, headers });
      const body = await response.body.text();
      return { status: response.statusCode, headers: response.headers, body, tookMs: performance.now() - startedAt };
    };

    /** Teaches a route its time: `count` requests one after another, with time to spare. */
    const warm = async (path: string, count = 25) => {
      for (let i = 0; i < count; i++) {
        const a = await get(path, { 'x-request-deadline': '5000' });
        if (process.env.DEBUG_ADMISSION) console.log('warm', path, i, a.status, a.body.slice(0, 200));
        expect(a.status).toBe(200);
      }
    };

    beforeAll(async () => {
      server = await harness.start(
        {
          serviceName: HOP,
          defaultMs: 5_000,
          // Trusted: the urgency test needs callers whose priority counts.
          trust: () => true,
          admission: { exempt: (req: { url?: string }) => req.url === '/health' || req.url === '/ping' },
        } as never,
        routes,
      );
      diagnostics.subscribe(DiagnosticsChannel.AdmissionRefused, onRefused);
      await warm('/cpu');
      // express and Koa mark a route long-lived in its own middleware, which runs after the verdict: they learn it
      // from the route's first request.
      expect((await get('/long-poll')).status).toBe(200);
    });

    afterAll(async () => {
      diagnostics.unsubscribe(DiagnosticsChannel.AdmissionRefused, onRefused);
      await server?.close();
      await agent.close();
    });

    it('an idle loop refuses nothing: 40 requests one after another', async () => {
      const before = refusals.length;
      for (let i = 0; i < 40; i++) {
        const budget = [5_000, 2_000, 1_000][i % 3] as number;
        const answer = await get('/cpu', { 'x-request-deadline': String(budget) });
        expect(answer.status).toBe(200);
      }
      expect(refusals.length).toBe(before);
    });

    it('a burst the loop cannot serve in time: the rest refused at arrival with 503, their handlers never run, the others answered in time', async () => {
      const before = { cpu: runs.cpu, done: cpuDoneAt.length, refusals: refusals.length, lines: server.logs.length };
      const budgetMs = 1_500;
      // 40 requests written while the loop is busy for 300 ms, then 40 × 40 ms of CPU: more than the budget. The
      // queue counts twice (core's admission.ts), so about 10 are let in.
      const burst = await whileBlocked(
        Array.from(
          { length: 40 },
          () => ['/cpu', { 'x-request-deadline': String(budgetMs) }] as [string, Record<string, string>],
        ),
      );
      const refused = burst.filter((a) => a.status === 503);
      const answered = burst.filter((a) => a.status === 200);
      expect(refused.length).toBeGreaterThanOrEqual(5);
      expect(answered.length).toBeGreaterThanOrEqual(5);
      expect(refused.length + answered.length).toBe(burst.length);
      // The ones let in could finish: their handlers were done by the budget, counted from when the burst was sent
      // (the server's side: this client reads its answers only once the server's stretch is over). The queue counted
      // twice leaves room: the last ones let in end near half of it. Without admission the last would end at ~1.9 s.
      const doneMs = cpuDoneAt.slice(before.done).map((doneAt) => doneAt - burstSentAt);
      for (const ms of doneMs) expect(ms).toBeLessThan(budgetMs);
      // Nothing of a refused request ran: only the admitted ones reached the handler.
      expect(runs.cpu - before.cpu).toBe(answered.length);
      for (const answer of refused) {
        expect(answer.headers[DEADLINE_REFUSED_BY_HEADER]).toBe(HOP);
        expect(Number(answer.headers['retry-after'])).toBeGreaterThanOrEqual(1);
        const body = JSON.parse(answer.body) as OverloadedBody;
        expect(body).toMatchObject({ error: 'overloaded', refusedBy: HOP, reason: 'overloaded' });
        expect(body.neededMs).toBeGreaterThan(body.remainingMs);
      }
      // Each refusal published once, naming the hop and the route as the adapter knows it.
      const published = refusals.slice(before.refusals);
      expect(published).toHaveLength(refused.length);
      for (const message of published) {
        expect(message).toMatchObject({ protocol: 'http', hop: HOP, reason: 'overloaded' });
        expect(['GET /cpu', 'GET']).toContain(message.route);
        expect(message.queueMs).toBeGreaterThanOrEqual(10);
      }
      // One line per refused request, outcome `refused`, at the level of requests that ended well (info).
      const lines = deadlineLines(server.logs.slice(before.lines)).filter((line) => line.outcome === 'refused');
      expect(lines).toHaveLength(refused.length);
      for (const line of lines)
        expect(line).toMatchObject({ level: 30, statusCode: 503, refused: 'overloaded', hop: HOP });
      expect(server.logs.slice(before.lines).filter((line) => line.level >= 50)).toEqual([]);
    });

    it('long-lived and exempt requests are never refused, however long the queue', async () => {
      const before = { ...runs };
      const [events, health, other] = await whileBlocked([
        ['/long-poll', { 'x-request-deadline': '200' }],
        ['/health', { 'x-request-deadline': '200' }],
        ['/cpu', { 'x-request-deadline': '200' }],
      ]);
      // The same queue refused the ordinary request beside them.
      expect(other?.status).toBe(503);
      expect(events?.status).not.toBe(503);
      expect(health?.status).not.toBe(503);
      expect(runs.events - before.events).toBe(1);
      expect(runs.health - before.health).toBe(1);
    });

    it("a trusted caller's urgency: u=1 is let in under load, u=6 is shed first, the default is judged by its time", async () => {
      const [urgent, normal, roomy, background] = await whileBlocked([
        ['/cpu', { 'x-request-deadline': '1000', priority: 'u=1' }],
        ['/cpu', { 'x-request-deadline': '100' }],
        ['/cpu', { 'x-request-deadline': '5000' }],
        ['/cpu', { 'x-request-deadline': '5000', priority: 'u=6, i' }],
      ]);
      expect(urgent?.status).toBe(200);
      expect(normal?.status).toBe(503);
      expect(JSON.parse(normal?.body ?? '{}')).toMatchObject({ reason: 'overloaded' });
      // Time enough for the queue and the route: let in.
      expect(roomy?.status).toBe(200);
      expect(background?.status).toBe(503);
      expect(JSON.parse(background?.body ?? '{}')).toMatchObject({ reason: 'low-priority' });
    });

    it("less left than the route's fastest typical time: 504 as this hop's deadline, unless none of the route runs", async () => {
      await warm('/sleepy');
      const before = runs.sleepy;
      // One of the route's requests held in flight: the estimate is not being tested by anyone else.
      let released!: Promise<Answer>;
      const held = new Promise<void>((resolve) => {
        releaseSleepy = resolve;
        released = get('/sleepy', { 'x-request-deadline': '5000' });
      });
      await untilTrue(() => runs.sleepy > before);
      const refused = await get('/sleepy', { 'x-request-deadline': '20' });
      expect(refused.status).toBe(504);
      expect(refused.headers[DEADLINE_EXCEEDED_BY_HEADER]).toBe(HOP);
      expect(runs.sleepy - before).toBe(1);
      releaseSleepy?.();
      releaseSleepy = undefined;
      await held;
      expect((await released).status).toBe(200);
      // None in flight now: the next such request is let through to test the estimate (and meets its deadline).
      const probe = await get('/sleepy', { 'x-request-deadline': '20' });
      expect(runs.sleepy - before).toBe(2);
      expect(probe.status).toBe(504);
    });
  });
}
