/**
 * Nest apps for the tests, on either platform: the module, the routes of the server conformance suite as a
 * controller, and the app started on a free port.
 */
import 'reflect-metadata';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type DynamicModule, type INestApplication, Logger, type LoggerService, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import nestCore from '@nestjs/core/package.json' with { type: 'json' };
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { LogLine } from '../../server/test/harness.ts';

/** The NestJS under test, as test titles name it: `nestjs 12`, or `nestjs 11` in the nestjs:nest11 project. */
export const NEST = `nestjs ${nestCore.version.split('.')[0]}`;

export type Platform = 'express' | 'fastify';

/** A Nest logger that keeps every line (and the objects logged) in memory, with pino's level numbers. */
export class MemoryLogger implements LoggerService {
  constructor(readonly lines: LogLine[]) {}
  #push(level: number, message: unknown, rest: unknown[]) {
    const fields =
      typeof message === 'object' && message !== null ? (message as Record<string, unknown>) : { msg: message };
    const stack = level >= 50 && typeof rest[0] === 'string' && rest.length > 1 ? rest[0] : undefined;
    this.lines.push({ level, ...fields, ...(stack === undefined ? {} : { stack }), context: rest.at(-1) });
  }
  log(message: unknown, ...rest: unknown[]) {
    this.#push(30, message, rest);
  }
  error(message: unknown, ...rest: unknown[]) {
    this.#push(50, message, rest);
  }
  warn(message: unknown, ...rest: unknown[]) {
    this.#push(40, message, rest);
  }
  debug(message: unknown, ...rest: unknown[]) {
    this.#push(20, message, rest);
  }
  verbose(message: unknown, ...rest: unknown[]) {
    this.#push(10, message, rest);
  }
}

/** Starts `root` (which imports the module) on `platform`, on a free port, logging to `lines`. */
export async function startNest(
  root: Type<unknown> | DynamicModule,
  platform: Platform,
  lines: LogLine[],
  configure?: (app: INestApplication) => void | Promise<void>,
): Promise<{ app: INestApplication; url: string; close(): Promise<void> }> {
  const adapter = platform === 'express' ? new ExpressAdapter() : new FastifyAdapter();
  const app = await NestFactory.create<INestApplication>(root as Type<unknown>, adapter as ExpressAdapter, {
    logger: new MemoryLogger(lines),
  });
  Logger.overrideLogger(new MemoryLogger(lines));
  await configure?.(app);
  await app.listen(0, '127.0.0.1');
  const server = app.getHttpServer() as Server;
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    app,
    url,
    async close() {
      server.closeAllConnections?.();
      await app.close();
    },
  };
}
