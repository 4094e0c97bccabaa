/**
 * Compiled by the typecheck (`tsc -p test/tsconfig.json`), never run: the middleware, `deadlineErrors()` and
 * `longLived()` fit an app typed with `DeadlineEnv` and variables of its own, and an untyped app, under `strict`.
 */
import { Hono } from 'hono';
import { type DeadlineEnv, deadline, deadlineErrors, longLived } from '../src/index.ts';

interface User {
  id: string;
}
const app = new Hono<DeadlineEnv & { Variables: { user: User } }>();
app.use(deadline({ serviceName: 'orders' }));
app.onError(deadlineErrors((err, c) => c.json({ error: String(err), user: c.var.user?.id }, 500)));
app.get('/', longLived(), (c) => c.json({ left: c.var.deadline?.remainingMs(), user: c.var.user.id }));
const plain = new Hono();
plain.use(deadline());
plain.onError(deadlineErrors());
