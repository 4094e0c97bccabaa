// Koa 2, installed under an alias to test both majors; the part of Koa 3's types the tests use is Koa 2's too.
declare module 'koa2' {
  import Koa from 'koa';
  export default Koa;
}

declare module 'koa-pino-logger' {
  import type { Middleware } from 'koa';
  import type { Logger } from 'pino';
  export default function koaPinoLogger(options: { logger: Logger; autoLogging?: boolean }): Middleware;
}
