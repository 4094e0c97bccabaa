/**
 * Puts the request's deadline in front of everything Nest adds to the platform: the express middleware, or the
 * fastify plugin whose request hook runs first. It is mounted as soon as the platform's adapter exists — while Nest
 * instantiates the modules (`NestFactory.create()`), or when a testing module makes its application — so before
 * `app.init()` adds the body parsers, the app's Nest middleware and the routes: the budget starts when the request
 * arrives, and all of them run inside its context.
 */
import { deadline } from '@deadline/express';
import type { HttpAdapterHost } from '@nestjs/core';
import { fastifyFirst } from './fastify-first.js';
import type { ModuleSetup } from './options.js';

interface PlatformAdapter {
  getType(): string;
  getInstance(): unknown;
}

/** Mounts the deadline on the application's platform once its adapter is known. @internal */
export function mountOnPlatform(host: HttpAdapterHost, setup: ModuleSetup): void {
  const init$ = (host as { init$?: { subscribe(next: () => void): unknown } }).init$;
  if (init$ !== undefined) {
    // Emitted when the adapter is set, and at once for one set already (a ReplaySubject).
    init$.subscribe(() => mount(host.httpAdapter as unknown as PlatformAdapter | undefined, setup));
  } else {
    mount(host.httpAdapter as unknown as PlatformAdapter | undefined, setup);
  }
}

const mounted = new WeakSet<object>();

function mount(adapter: PlatformAdapter | null | undefined, setup: ModuleSetup): void {
  // No HTTP platform (a standalone application, a microservice alone): nothing to mount.
  if (adapter === undefined || adapter === null) return;
  const instance = adapter.getInstance() as object;
  if (mounted.has(instance)) return;
  mounted.add(instance);
  const type = adapter.getType();
  if (type === 'express') {
    (instance as { use(middleware: unknown): void }).use(deadline(setup.platform as never));
  } else if (type === 'fastify') {
    fastifyFirst(instance, setup.platform);
  } else {
    throw new TypeError(`@deadline/nestjs: unsupported HTTP platform '${type}' (express and fastify are)`);
  }
}
