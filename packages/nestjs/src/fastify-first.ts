/**
 * `@deadline/fastify` on Nest's fastify instance, its request hook moved in front of the request hooks added before
 * it. Nest registers middie — which runs the app's Nest middleware from a request hook of its own — and hooks of its
 * adapter's while it creates the application, before any module of the app is instantiated: in fastify's order of
 * registration the plugin's hook would run after them, and the Nest middleware outside the request's context, before
 * its budget started. fastify binds the hooks to its routes when it starts, from its own list of them; the plugin's
 * one request hook is moved to the front of that list once fastify has added it (after the plugin loaded). If a later
 * fastify keeps its hooks otherwise, the plugin stays where it was registered, and the tests that run Nest middleware
 * on fastify say so.
 */
import fastifyDeadline from '@deadline/fastify';
import fp from 'fastify-plugin';
import type { DeadlineModuleOptions } from './options.js';

type Hooks = { onRequest: unknown[] };
type Instance = Record<symbol, unknown> & {
  register(plugin: unknown, options?: unknown): unknown;
};

/** fastify's own list of an instance's hooks (its `kHooks` symbol), if it still keeps them that way. */
function hooksOf(fastify: object): Hooks | undefined {
  const key = Object.getOwnPropertySymbols(fastify).find((symbol) => symbol.description === 'fastify.hooks');
  const hooks = key === undefined ? undefined : (fastify as Record<symbol, unknown>)[key];
  return Array.isArray((hooks as Hooks | undefined)?.onRequest) ? (hooks as Hooks) : undefined;
}

const first = fp(
  (fastify, options: DeadlineModuleOptions, done) => {
    const hooks = hooksOf(fastify);
    const before = hooks?.onRequest.length ?? 0;
    (fastifyDeadline as unknown as (f: unknown, o: unknown, d: (error?: Error) => void) => void)(
      fastify,
      options,
      (error) => {
        // fastify adds a plugin's hooks once the plugin has loaded (`after`): moved in the step that follows them.
        if (error === undefined && hooks !== undefined) {
          fastify.after(() => {
            hooks.onRequest.unshift(...hooks.onRequest.splice(before));
          });
        }
        done(error);
      },
    );
  },
  { fastify: '5.x', name: '@deadline/nestjs' },
);

/** Registers the plugin on `instance`, its request hook first. @internal */
export function fastifyFirst(instance: object, options: DeadlineModuleOptions): void {
  (instance as Instance).register(first, options);
}
