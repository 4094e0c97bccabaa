/** The unawaited-work suite (test/support/unawaited-work.ts) on NestJS (express platform). */
import 'reflect-metadata';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Controller, Get, type INestApplication, Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { memoryLogger, type Route, type StartHost, unawaitedWorkSuite } from '../../../test/support/unawaited-work.ts';
import { DeadlineModule } from '../src/index.ts';
import { NEST } from './harness.ts';

/** The route the running test gave its host. */
let current: Route = () => {};

@Controller()
class RouteController {
  @Get('route')
  async route(): Promise<string> {
    let body = '';
    await current((answer) => {
      body = answer;
    });
    return body;
  }
}

const onExpress: StartHost = async (route, options) => {
  current = route;
  const { logger, lines } = memoryLogger();
  @Module({
    imports: [DeadlineModule.forRoot({ serviceName: 'orders', logger, ...options })],
    controllers: [RouteController],
  })
  class AppModule {}
  const app = await NestFactory.create<INestApplication>(AppModule as Type<unknown>, new ExpressAdapter(), {
    logger: false,
    abortOnError: false,
  });
  await app.listen(0, '127.0.0.1');
  const server = app.getHttpServer() as Server;
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    lines,
    async close() {
      server.closeAllConnections?.();
      await app.close();
    },
  };
};

// On express: fastify's platform runs @deadline/fastify's hooks, whose work left running the suite meets in packages/jobs.
unawaitedWorkSuite({ [`${NEST} on express`]: onExpress });
