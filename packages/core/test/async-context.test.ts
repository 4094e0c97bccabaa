/**
 * What the library needs of AsyncLocalStorage, stated on whichever of Node's two implementations runs it:
 * async_hooks (Node 20 and 22) or AsyncContextFrame (the default from Node 24). CI runs the suite on each
 * (.ci/run), so a behaviour the library relies on that changes with the implementation fails here, in a block
 * named after it. propagation.test.ts has the ordinary continuations (await, timers, thenables, streams).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { execFile } from 'node:child_process';
import { EventEmitter, once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { type AddressInfo, connect, createServer as createTcpServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { currentContext, type OwnedContext, runWithDeadline } from '../src/index.ts';
import { outsideContext, type Scope, storage } from '../src/internal.ts';
import { implementationHere } from './support/als-implementation.ts';

const { expected, found } = implementationHere();

/** Runs `fn` in a fresh context and hands it the context too. */
function inContext<R>(fn: (ctx: OwnedContext) => R): R {
  return runWithDeadline(5_000, fn);
}

describe(`AsyncLocalStorage on Node ${process.version}: ${found}`, () => {
  it('is the implementation this Node is expected to run', () => {
    // From the version and flags; `found` from behaviour (see support/als-implementation.ts). If they disagree,
    // Node changed what the tests below are run against: they still say what the library needs.
    expect(found).toBe(expected);
  });

  it('the one storage of the process is on globalThis under its versioned Symbol.for key', () => {
    const shared = (globalThis as Record<symbol, unknown>)[Symbol.for('@deadline/core/storage@1')];
    expect(shared).toBe(storage);
    expect(shared).toBeInstanceOf(AsyncLocalStorage);
    // A copy of core loaded later takes this object, so what it runs is what this copy sees, and back.
    inContext((ctx) => {
      expect((shared as AsyncLocalStorage<Scope>).getStore()).toBe(ctx);
    });
    const foreign = { deadline: undefined } as unknown as Scope;
    expect((shared as AsyncLocalStorage<Scope>).run(foreign, () => currentContext())).toBe(foreign);
  });

  it('storage.exit() differs between them, which is why the library uses outsideContext() instead', () => {
    const als = new AsyncLocalStorage<string>();
    const afterRun = als.run('outer', () =>
      als.exit(() => {
        als.run('inner', () => {});
        return als.getStore();
      }),
    );
    const afterEnterWith = als.run('outer', () => {
      als.exit(() => als.enterWith('entered'));
      return als.getStore();
    });
    // async_hooks: the outer store back after a run() inside, and an enterWith() inside leaking out.
    if (found === 'async_hooks') expect([afterRun, afterEnterWith]).toEqual(['outer', 'entered']);
    else expect([afterRun, afterEnterWith]).toEqual([undefined, 'outer']);
  });

  it('run() leaves nothing behind: after it returns, throws or settles, the caller has its own context', async () => {
    // A fresh top level (no test runner's context above): whatever run() leaked would show here.
    await new Promise<void>((resolve, reject) =>
      setImmediate(async () => {
        try {
          inContext(() => 1);
          expect(currentContext()).toBeUndefined();
          expect(() =>
            inContext(() => {
              throw new Error('thrown');
            }),
          ).toThrow('thrown');
          expect(currentContext()).toBeUndefined();
          await inContext(async () => {
            await null;
          });
          expect(currentContext()).toBeUndefined();
          await inContext(async () => Promise.reject(new Error('rejected'))).catch(() => {});
          expect(currentContext()).toBeUndefined();
          resolve();
        } catch (error) {
          reject(error);
        }
      }),
    );
  });

  it('no library source calls enterWith(), exit() or disable(), whose edges differ between implementations', () => {
    const packages = fileURLToPath(new URL('../../', import.meta.url));
    const offenders: string[] = [];
    for (const name of readdirSync(packages)) {
      const src = join(packages, name, 'src');
      let files: string[];
      try {
        files = readdirSync(src, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.ts'));
      } catch {
        continue; // not a package with sources
      }
      for (const file of files) {
        // Comments may name them (storage.ts says why not): code only.
        const text = readFileSync(join(src, file), 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '');
        if (/\b(storage|als)\s*\.\s*(enterWith|exit|disable)\s*\(/.test(text)) offenders.push(`${name}/src/${file}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});

describe(`outsideContext (what side connections are opened in), on ${found}`, () => {
  it('runs fn with no context, returns what it returns, lets its error through, and restores the caller’s', () =>
    inContext((ctx) => {
      expect(outsideContext(() => currentContext())).toBeUndefined();
      expect(outsideContext(() => 42)).toBe(42);
      expect(() =>
        outsideContext(() => {
          throw new Error('through');
        }),
      ).toThrow('through');
      expect(currentContext()).toBe(ctx);
    }));

  it('a run() inside does not bring the caller’s context back, for the rest of fn or what it starts', async () => {
    const seen = await inContext(() =>
      outsideContext(() => {
        // A hook or a diagnostics subscriber running something in a context of its own: on async_hooks
        // `storage.exit()` would see the caller's context again from here on (see below).
        inContext(() => {});
        const after = currentContext();
        const timer = new Promise((resolve) => setTimeout(() => resolve(currentContext()), 1));
        const tick = new Promise((resolve) => process.nextTick(() => resolve(currentContext())));
        return Promise.all([after, timer, tick]);
      }),
    );
    expect(seen).toEqual([undefined, undefined, undefined]);
  });

  it('an enterWith() inside (by code it calls) does not outlive it', () =>
    inContext((ctx) => {
      const entered = { deadline: undefined } as unknown as Scope;
      outsideContext(() => storage.enterWith(entered));
      expect(currentContext()).toBe(ctx);
    }));

  it('a socket opened inside runs its events outside any context, though a request opened it', async () => {
    const server = createTcpServer((socket) => socket.end('hello'));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const { port } = server.address() as AddressInfo;
      const [inside, outside] = await Promise.all(
        [false, true].map((side) =>
          inContext(async () => {
            const socket: Socket = side ? outsideContext(() => connect(port, '127.0.0.1')) : connect(port, '127.0.0.1');
            const [, seen] = await Promise.all([
              once(socket, 'close'),
              // The listener is added here, in the request's context; what it sees is the socket's.
              new Promise((resolve) => socket.once('data', () => resolve(currentContext()))),
            ]);
            return { seen, ctx: currentContext() };
          }),
        ),
      );
      expect(inside?.seen).toBe(inside?.ctx);
      expect(outside?.seen).toBeUndefined();
    } finally {
      server.close();
    }
  });
});

describe(`where callbacks run, on ${found}`, () => {
  it('an event listener runs in the context of emit(), not of on(): what bindContext and the request wrap are for', () => {
    const emitter = new EventEmitter();
    const seen: unknown[] = [];
    let adding: OwnedContext | undefined;
    inContext((ctx) => {
      adding = ctx;
      emitter.on('x', () => seen.push(currentContext()));
    });
    const emitting = inContext((ctx) => {
      emitter.emit('x');
      return ctx;
    });
    emitter.emit('x');
    expect(seen).toHaveLength(2);
    expect(seen[0]).toBe(emitting);
    expect(seen[0]).not.toBe(adding);
    expect(seen[1]).toBeUndefined();
  });

  it('a then() callback runs in the context then() was called in, not the one that resolved the promise', async () => {
    let resolveIt: () => void = () => {};
    const promise = new Promise<void>((resolve) => (resolveIt = resolve));
    const attached = inContext(async (ctx) => {
      await promise;
      return currentContext() === ctx;
    });
    inContext(() => resolveIt());
    expect(await attached).toBe(true);
  });

  it('an http server runs its handler, and a request’s socket events, in the context listen() was called in', async () => {
    // Not the request's context: hence the adapters enter it per request and emit the request's stream events
    // in it (packages/server/src/events-in-context.ts).
    const seen: Record<string, unknown> = {};
    const server = createServer((req, res) => {
      seen.handler = currentContext();
      req.resume();
      req.on('end', () => {
        seen.end = currentContext();
        res.end('ok');
      });
    });
    let listening: OwnedContext | undefined;
    await new Promise<void>((resolve) =>
      runWithDeadline(60_000, (ctx) => {
        listening = ctx;
        server.listen(0, '127.0.0.1', resolve);
      }),
    );
    try {
      const { port } = server.address() as AddressInfo;
      await inContext(
        () =>
          new Promise<void>((resolve, reject) => {
            const req = request({ port, host: '127.0.0.1', method: 'POST' }, (res) => {
              res.resume();
              res.on('end', resolve);
            });
            req.on('error', reject);
            req.end('body');
          }),
      );
      expect(seen.handler).toBe(listening);
      expect(seen.end).toBe(listening);
    } finally {
      server.close();
    }
  });

  it('unhandledRejection and uncaughtException handlers see the context the failure happened in', async () => {
    // In a process of its own: the test runner reports every unhandled rejection as a failure.
    const script = fileURLToPath(new URL('./fixtures/failure-context.mjs', import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, [script], { timeout: 20_000 });
    expect(JSON.parse(stdout)).toEqual({
      unhandledRejection: 'request',
      'unhandledRejection after an await': 'request',
      uncaughtException: 'request',
    });
  });
});
