/**
 * The library's lines through Nest's `Logger`: whatever the app logs with — Nest's console logger, or the logger it
 * gave `app.useLogger()` (nestjs-pino's, winston's) — writes them, with the line's fields as one object.
 */

import type { LineLogger } from '@deadline/server';
import { Logger } from '@nestjs/common';

/** Nest's `Logger`, as read here: the app's logger it writes to, none when the app was made with `logger: false`. */
const NestLogger = Logger as unknown as { staticInstanceRef?: unknown };

/**
 * A `LineLogger` over Nest's `Logger`, in the context `Deadline`. With the app's logging off (`logger: false`) the
 * line is not even built. Any other level choice is the app's logger's own (`Logger.isLevelEnabled()` cannot say: on
 * NestJS 11 it answers false for every level when no levels were set, though all are written).
 * @internal
 */
export function nestLineLogger(logger = new Logger('Deadline')): LineLogger {
  return {
    info: (line, msg) => logger.log({ msg, ...line }),
    warn: (line, msg) => logger.warn({ msg, ...line }),
    debug: (line, msg) => logger.debug({ msg, ...line }),
    isLevelEnabled: () => NestLogger.staticInstanceRef !== undefined,
  };
}
