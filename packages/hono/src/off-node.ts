/**
 * Off Node — Bun, Deno, a worker, or `app.request()` in a test, where no Node request and response come with the
 * request (`c.env.incoming`, `c.env.outgoing` are `@hono/node-server`'s) — the middleware lets requests through as
 * they ran before it: without a deadline. Said once per process, so that it is not mistaken for one.
 */

let warned = false;

/** @internal */
export function warnOnceOffNode(): void {
  if (warned) return;
  warned = true;
  process.emitWarning(
    "@deadline/hono: a request came without @hono/node-server's Node request and response (c.env.incoming, c.env.outgoing), so it runs without a deadline; serve the app with @hono/node-server",
    { type: 'DeadlineWarning', code: 'DEADLINE_HONO_OFF_NODE' },
  );
}
