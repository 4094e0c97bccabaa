/**
 * The module on NestJS 12 (and 11, in the nestjs:nest11 project), on express and on fastify, through the server conformance and long-lived suites: each
 * generic route becomes a route of a Nest controller, answering the way Nest apps do — a returned body with its
 * status set on the passthrough response, a `StreamableFile` for a stream, the raw response for server-sent events.
 */
import 'reflect-metadata';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Controller, Get, Module, Post, Req, Res, StreamableFile, type Type } from '@nestjs/common';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { admissionSuite } from '../../server/test/admission.ts';
import { conformanceSuite } from '../../server/test/conformance.ts';
import type { Harness, LogLine, Route } from '../../server/test/harness.ts';
import { longLivedSuite } from '../../server/test/long-lived.ts';
import { Deadline, DeadlineModule } from '../src/index.ts';
import { NEST, type Platform, startNest } from './harness.ts';

interface PlatformResponse {
  status?(code: number): PlatformResponse;
  code?(code: number): PlatformResponse;
  header(name: string, value: string): PlatformResponse;
  raw?: NodeJS.WritableStream & {
    destroyed: boolean;
    writeHead(status: number, headers: Record<string, string>): void;
  };
  writeHead?(status: number, headers: Record<string, string>): void;
}

/** A controller whose routes are `routes`, each calling its generic handler. */
function controllerOf(routes: Route[]): Type<unknown> {
  class Routes {}
  routes.forEach((route, index) => {
    const name = `route${index}`;
    // Server-sent events are written on the raw response; every other route returns its body.
    const events = route.path.startsWith('/events');
    Object.defineProperty(Routes.prototype, name, {
      value: async (req: Readable & { raw?: Readable; deadline?: never }, res: PlatformResponse) => {
        let body: unknown;
        let file: StreamableFile | undefined;
        await route.handler({
          deadline: req.deadline as never,
          body: route.method === 'POST' ? (req.raw ?? req) : undefined,
          reply(status, replyBody, headers) {
            (res.status ?? res.code)?.call(res, status);
            for (const [key, value] of Object.entries(headers ?? {})) res.header(key, value);
            body = replyBody;
          },
          async stream(status, chunks) {
            (res.status ?? res.code)?.call(res, status);
            file = new StreamableFile(Readable.from(chunks), { type: 'text/plain' });
          },
          async events(chunks) {
            const raw = res.raw ?? (res as unknown as NonNullable<PlatformResponse['raw']>);
            raw.writeHead(200, { 'content-type': 'text/event-stream' });
            // Cut at its deadline (or left by its client), the stream fails after its headers went out: the route
            // ends there. Thrown on, Nest 11 on fastify would answer it over those headers (its adapter's
            // isHeadersSent reads only reply.sent), and fastify throw that as an unhandled rejection; Nest 12 ends it.
            await pipeline(Readable.from(chunks), raw).catch((error: unknown) => {
              if (!raw.destroyed) throw error;
            });
          },
        });
        return file ?? body;
      },
      writable: true,
      configurable: true,
    });
    const descriptor = Object.getOwnPropertyDescriptor(Routes.prototype, name) as PropertyDescriptor;
    (route.method === 'GET' ? Get : Post)(route.path.slice(1))(Routes.prototype, name, descriptor);
    if (route.longLived === true) Deadline(false)(Routes.prototype, name, descriptor);
    Req()(Routes.prototype, name, 0);
    Res({ passthrough: !events })(Routes.prototype, name, 1);
  });
  Controller()(Routes);
  return Routes;
}

function nestHarness(platform: Platform): Harness {
  return {
    name: `${NEST} on ${platform}`,
    ownErrorBody: true,
    async start(options, routes) {
      const logs: LogLine[] = [];
      @Module({ imports: [DeadlineModule.forRoot(options as never)], controllers: [controllerOf(routes)] })
      class AppModule {}
      const started = await startNest(AppModule, platform, logs, (app) => {
        if (platform === 'fastify') {
          (app as NestFastifyApplication)
            .getHttpAdapter()
            .getInstance()
            .addContentTypeParser('application/octet-stream', (_request, payload, done) => done(null, payload));
        }
      });
      return { url: started.url, logs, close: started.close };
    },
  };
}

for (const platform of ['express', 'fastify'] as const) {
  conformanceSuite(nestHarness(platform));
  longLivedSuite(nestHarness(platform));
  admissionSuite(nestHarness(platform));
}
