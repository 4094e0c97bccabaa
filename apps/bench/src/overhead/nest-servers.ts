/**
 * The hello-world Nest servers for the instruction counts, on each platform: bare, with the floor (one `als.run` per
 * request, as a Nest middleware would be mounted on the platform), with the floor and a global interceptor that only
 * passes the route through (what Nest's interceptor pipeline costs a request, which any module that hands the
 * exception layer typed errors or reads a route's metadata per request pays), and with `@deadline/nestjs`. Apart from
 * servers.ts because Nest's decorators and its modules are loaded only by these variants (every Nest process loads
 * the library's module, whichever variant it runs, as servers.ts does for the others).
 */
import 'reflect-metadata';
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Server } from 'node:http';
import {
  type CallHandler,
  Controller,
  type DynamicModule,
  Get,
  type INestApplication,
  Injectable,
  Module,
  type NestInterceptor,
  type Type,
} from '@nestjs/common';

const hello = { hello: 'world' };

@Controller()
class HelloController {
  @Get()
  hello() {
    return hello;
  }
}

@Injectable()
class PassThrough implements NestInterceptor {
  intercept(_context: unknown, next: CallHandler) {
    return next.handle();
  }
}

/**
 * What a variant adds to the app: a module to import, a middleware on the platform's instance (the floor), a global
 * interceptor that passes each route through.
 */
interface NestSetUp {
  imports?: DynamicModule[];
  floor?: boolean;
  passThrough?: boolean;
}

/** The hello-world Nest server on `platform`, with `setUp`. */
export async function nestServer(platform: 'express' | 'fastify', setUp: NestSetUp = {}): Promise<Server> {
  await import('@deadline/nestjs');
  const { NestFactory } = await import('@nestjs/core');
  const { APP_INTERCEPTOR } = await import('@nestjs/core');
  const providers = setUp.passThrough === true ? [{ provide: APP_INTERCEPTOR, useClass: PassThrough }] : [];
  @Module({ imports: setUp.imports ?? [], controllers: [HelloController], providers })
  class AppModule {}
  const adapter =
    platform === 'express'
      ? new (await import('@nestjs/platform-express')).ExpressAdapter()
      : new (await import('@nestjs/platform-fastify')).FastifyAdapter();
  const app = await NestFactory.create<INestApplication>(AppModule as Type<unknown>, adapter as never, {
    logger: false,
  });
  if (setUp.floor === true) {
    const als = new AsyncLocalStorage<object>();
    const instance = adapter.getInstance() as {
      use?(middleware: (req: unknown, res: unknown, next: () => void) => void): void;
      addHook?(name: 'onRequest', hook: (request: unknown, reply: unknown, done: () => void) => void): void;
    };
    if (platform === 'express') instance.use?.((_req, _res, next) => als.run({}, next));
    else instance.addHook?.('onRequest', (_request, _reply, done) => als.run({}, done));
  }
  await app.listen(0, '127.0.0.1');
  return app.getHttpServer() as Server;
}

/** `@deadline/nestjs`'s module, as an app imports it. */
export async function deadlineModule(): Promise<DynamicModule[]> {
  const { DeadlineModule } = await import('@deadline/nestjs');
  return [DeadlineModule.forRoot({ serviceName: 'bench' })];
}
