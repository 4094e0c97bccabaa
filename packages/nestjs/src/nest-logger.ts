/**
 * The library's lines through Nest's `Logger`: whatever the app logs with — Nest's console logger, or the logger it
 * gave `app.useLogger()` (nestjs-pino's, winston's) — writes them, with the line's fields as one object.
 */

import type { LineLogger } from '@deadline/server';
import { Logger } from '@nestjs/common';

/** A `LineLogger` over Nest's `Logger`, in the context `Deadline`. @internal */
export function nestLineLogger(logger = new Logger('Deadline')): LineLogger {
  return {
    info: (line, msg) => logger.log({ msg, ...line }),
    warn: (line, msg) => logger.warn({ msg, ...line }),
    debug: (line, msg) => logger.debug({ msg, ...line }),
  };
}
