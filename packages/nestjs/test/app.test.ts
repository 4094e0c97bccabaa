/**
 * A Nest app shaped like the ones services run, on express and on fastify: a Nest middleware, a global guard, an
 * interceptor and a validation pipe of the app's own, a request-scoped provider, `nestjs-cls` beside the module, the
 * app's own catch-all exception filter (registered with `useGlobalFilters`, so tried before the module's), routes
 * that query PostgreSQL and that call a downstream, and `@Deadline()` on a controller and a route. What each layer
 * sees of the request's context, what the client gets when a deadline error escapes early, at the deadline and when
 * it leaves, and what is logged: one line of the library's through Nest's `Logger`, nothing at error level.
 */
import 'reflect-metadata';
import {
  CancelledError,
  currentContext,
  type DeadlineContext,
  DeadlineExceededError,
  findDeadlineError,
  timeoutFor,
} from '@deadline/core';
import { withDeadline } from '@deadline/pg';
import { CircuitOpenError } from '@deadline/resilience';
import {
  type ArgumentsHost,
  Body,
  type CallHandler,
  type CanActivate,
  Catch,
  Controller,
  type ExceptionFilter,
  type ExecutionContext,
  Get,
  Inject,
  Injectable,
  type MiddlewareConsumer,
  Module,
  type NestInterceptor,
  type NestMiddleware,
  Param,
  type PipeTransform,
  Post,
  Scope,
  UsePipes,
} from '@nestjs/common';
import { APP_GUARD, APP_INTERCEPTOR, HttpAdapterHost, REQUEST } from '@nestjs/core';
import { ClsModule, ClsService } from 'nestjs-cls';
import pg from 'pg';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { ServerActivity } from '../../pg/test/support/activity.ts';
import { leaveMidQuery, lineOf, postWithinBudget, runOutOfBudget } from '../../server/test/app-errors.ts';
import type { LogLine } from '../../server/test/harness.ts';
import { Deadline, DeadlineExceptionFilter, DeadlineModule } from '../src/index.ts';
import { NEST, type Platform, startNest } from './harness.ts';

const available = await requireService(POSTGRES);

/** pino's level number for error. */
const ERROR = 50;

/** What each layer saw of the request's context: its own `currentContext()`, by layer, for the last request. */
const seen = new Map<string, DeadlineContext | undefined>();
/** What the app's own catch-all filter got. */
const caught: unknown[] = [];
let db: ReturnType<typeof withDeadline<pg.Pool>>;

const downstream = () =>
  new DeadlineExceededError({ phase: 'during-call', whose: 'downstream:inventory', budgetMs: 80 });

@Injectable()
class ContextMiddleware implements NestMiddleware {
  use(_req: unknown, _res: unknown, next: () => void) {
    seen.set('middleware', currentContext());
    next();
  }
}

@Injectable()
class ContextGuard implements CanActivate {
  canActivate() {
    seen.set('guard', currentContext());
    return true;
  }
}

@Injectable()
class ContextInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler) {
    seen.set('interceptor', currentContext());
    return next.handle();
  }
}

@Injectable()
class ContextPipe implements PipeTransform {
  transform(value: unknown) {
    seen.set('pipe', currentContext());
    return value;
  }
}

@Injectable({ scope: Scope.REQUEST })
class RequestScoped {
  readonly context: DeadlineContext | undefined;
  constructor(@Inject(REQUEST) readonly request: unknown) {
    this.context = currentContext();
  }
}

/** The app's own catch-all: deadline errors to the module's filter, the rest answered 500 and logged. */
@Catch()
class AllExceptionsFilter implements ExceptionFilter {
  constructor(
    private readonly deadlines: DeadlineExceptionFilter,
    private readonly adapter: HttpAdapterHost,
  ) {}
  catch(exception: unknown, host: ArgumentsHost) {
    caught.push(exception);
    seen.set('filter', currentContext());
    if (findDeadlineError(exception) !== undefined) return this.deadlines.catch(exception, host);
    const response = host.switchToHttp().getResponse();
    this.adapter.httpAdapter.reply(response, { error: 'internal' }, 500);
  }
}

@Controller('orders')
class OrdersController {
  constructor(
    @Inject(RequestScoped) private readonly scoped: RequestScoped,
    @Inject(ClsService) private readonly cls: ClsService,
  ) {}

  @Get('context')
  @UsePipes(ContextPipe)
  context(@Param() _params: unknown) {
    seen.set('handler', currentContext());
    seen.set('request-scoped', this.scoped.context);
    return { cls: this.cls.getId() !== undefined, left: currentContext()?.deadline.remainingMs() };
  }

  @Post()
  create(@Body() body: unknown) {
    return { received: body, left: currentContext()?.deadline.remainingMs() };
  }

  @Get('sleep/:marker')
  async sleep(@Param('marker') marker: string) {
    await db.query(`SELECT pg_sleep(5) /* ${marker} */`);
    return { ok: true };
  }

  @Get('downstream')
  downstream() {
    throw downstream();
  }

  // This hop's own deadline, before it passed: a call needing more than what is left is not made.
  @Get('no-time-for-the-call')
  noTime() {
    timeoutFor('orders-db', { marginMs: 60_000 });
    return 'called';
  }

  @Get('wrapped')
  wrapped() {
    throw new TypeError('fetch failed', { cause: downstream() });
  }

  @Get('cancelled')
  cancelled() {
    throw new CancelledError('stopped on purpose');
  }

  @Get('breaker')
  breaker() {
    throw new TypeError('fetch failed', { cause: new CircuitOpenError('inventory', 'open', 1_500) });
  }

  @Get('bug')
  bug() {
    throw new Error('a bug');
  }

  @Get('needs-time')
  @Deadline({ minMs: 100 })
  needsTime() {
    seen.set('needs-time', currentContext());
    return 'ran';
  }

  @Get('quick')
  @Deadline({ defaultMs: 300, maxMs: 500 })
  quick() {
    return { budgetMs: Math.round(currentContext()?.deadline.remainingMs() ?? 0) };
  }
}

@Controller('reports')
@Deadline({ defaultMs: 200 })
class ReportsController {
  @Get()
  async report() {
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    return 'too late';
  }

  @Get('feed')
  @Deadline(false)
  async feed() {
    await new Promise((resolve) => setTimeout(resolve, 400));
    return { longLived: currentContext()?.deadline.remainingMs() === Number.POSITIVE_INFINITY };
  }
}

@Module({
  imports: [
    DeadlineModule.forRoot({ serviceName: 'orders', defaultMs: 2_000 }),
    ClsModule.forRoot({ global: true, middleware: { mount: true, generateId: true } }),
  ],
  controllers: [OrdersController, ReportsController],
  providers: [
    RequestScoped,
    { provide: APP_GUARD, useClass: ContextGuard },
    { provide: APP_INTERCEPTOR, useClass: ContextInterceptor },
  ],
})
class AppModule {
  configure(consumer: MiddlewareConsumer) {
    consumer.apply(ContextMiddleware).forRoutes('*path');
  }
}

for (const platform of ['express', 'fastify'] as Platform[]) {
  describe.runIf(available)(`${NEST} on ${platform}: an app shaped like real ones`, () => {
    const logs: LogLine[] = [];
    let pool: pg.Pool;
    let activity: ServerActivity;
    let started: Awaited<ReturnType<typeof startNest>>;
    const sleeping = () => ({ url: started.url, logs, activity, path: (m: string) => `/orders/sleep/${m}` });
    const errorLines = () => logs.filter((line) => line.level >= ERROR);

    beforeAll(async () => {
      pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2, application_name: `deadline-nest-${process.pid}` });
      db = withDeadline(pool, { name: 'orders-db' });
      activity = await ServerActivity.open();
      started = await startNest(AppModule, platform, logs, (app) => {
        app.useGlobalFilters(new AllExceptionsFilter(app.get(DeadlineExceptionFilter), app.get(HttpAdapterHost)));
      });
    });
    afterAll(async () => {
      await started?.close();
      await activity?.end();
      await pool?.end();
    });

    it('every layer runs in the request’s context: middleware, guard, interceptor, pipe, request-scoped provider, handler', async () => {
      seen.clear();
      const res = await request(`${started.url}/orders/context`, { headers: { 'x-request-deadline': '900' } });
      const body = (await res.body.json()) as { cls: boolean; left: number };
      expect(res.statusCode).toBe(200);
      expect(body.cls).toBe(true);
      expect(body.left).toBeLessThanOrEqual(900);
      const handler = seen.get('handler');
      expect(handler).toBeDefined();
      for (const layer of ['middleware', 'guard', 'interceptor', 'pipe', 'request-scoped']) {
        expect(seen.get(layer), layer).toBe(handler);
      }
    });

    it('the budget starts before Nest’s body parser', async () => {
      await postWithinBudget(`${started.url}/orders`);
    });

    it('a deadline error escaping early: 504 naming whose, the app’s filter given the typed error, nothing at error level', async () => {
      caught.length = 0;
      const before = logs.length;
      const res = await request(`${started.url}/orders/downstream`);
      expect(res.statusCode).toBe(504);
      expect(res.headers['x-deadline-exceeded-by']).toBe('inventory');
      expect(await res.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'inventory' });
      expect(await lineOf(logs, before, 'deadline: deadline_exceeded')).toMatchObject({
        statusCode: 504,
        outcome: 'deadline_exceeded',
        exceededBy: 'inventory',
        context: 'Deadline',
      });
      const own = await request(`${started.url}/orders/no-time-for-the-call`);
      expect(own.statusCode).toBe(504);
      expect(own.headers['x-deadline-exceeded-by']).toBe('orders');
      await own.body.dump();
      const wrapped = await request(`${started.url}/orders/wrapped`);
      expect(wrapped.statusCode).toBe(504);
      expect(wrapped.headers['x-deadline-exceeded-by']).toBe('inventory');
      await wrapped.body.dump();
      const cancelled = await request(`${started.url}/orders/cancelled`);
      expect(cancelled.statusCode).toBe(499);
      await cancelled.body.dump();
      // The app's filter got each as the typed error itself, fetch's wrapper taken off, inside the context.
      expect(caught.map((error) => (error as Error).constructor.name)).toEqual([
        'DeadlineExceededError',
        'DeadlineExceededError',
        'DeadlineExceededError',
        'CancelledError',
      ]);
      expect(seen.get('filter')).toBeDefined();
      expect(errorLines()).toEqual([]);
    });

    it('a breaker’s refusal reaches the app’s filter unwrapped; any other error as it was thrown', async () => {
      caught.length = 0;
      const refused = await request(`${started.url}/orders/breaker`);
      await refused.body.dump();
      const bug = await request(`${started.url}/orders/bug`);
      expect(bug.statusCode).toBe(500);
      await bug.body.dump();
      expect(caught[0]).toBeInstanceOf(CircuitOpenError);
      expect(caught[1]).toMatchObject({ message: 'a bug' });
    });

    it('@Deadline() on a route narrows the budget; on a controller too; @Deadline(false) lifts it', async () => {
      const quick = (await (await request(`${started.url}/orders/quick`)).body.json()) as { budgetMs: number };
      expect(quick.budgetMs).toBeLessThanOrEqual(300);
      const trusted = await request(`${started.url}/orders/quick`, { headers: { 'x-request-deadline': '100' } });
      expect(((await trusted.body.json()) as { budgetMs: number }).budgetMs).toBeLessThanOrEqual(100);
      const before = logs.length;
      const report = await request(`${started.url}/reports`);
      expect(report.statusCode).toBe(504);
      expect(report.headers['x-deadline-exceeded-by']).toBe('orders');
      await report.body.dump();
      expect(await lineOf(logs, before, 'deadline: deadline_exceeded')).toMatchObject({ budgetMs: 200 });
      // A caller's budget below the route's minMs: refused with 504 before the route runs, nothing at error level.
      seen.delete('needs-time');
      const refused = await request(`${started.url}/orders/needs-time`, { headers: { 'x-request-deadline': '50' } });
      expect(refused.statusCode).toBe(504);
      expect(await refused.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'orders' });
      expect(seen.has('needs-time')).toBe(false);
      expect(errorLines()).toEqual([]);
      const feed = await request(`${started.url}/reports/feed`);
      expect(await feed.body.json()).toEqual({ longLived: true });
    });

    it('a client that leaves mid-query: one line, 499, the statement gone, the app’s filter not told', async () => {
      caught.length = 0;
      await leaveMidQuery(sleeping(), 'orders');
      expect(caught.filter((error) => !(error instanceof CancelledError))).toEqual([]);
      expect(errorLines()).toEqual([]);
    });

    it('a request out of budget: 504 at the deadline, the statement gone, nothing at error level', async () => {
      await runOutOfBudget(sleeping(), 'orders');
      expect(errorLines()).toEqual([]);
    });
  });
}
