/**
 * Where background work reports. A pino logger (or anything with pino's `(fields, message)` methods) fits; without
 * one, lines go to stderr as pino-shaped JSON, so a failure in detached work is never silent.
 */

/**
 * The logger methods used: pino's `(fields, message)` signature (pino, Fastify's `app.log`, a pino child).
 *
 * @example
 * ```ts
 * import pino from 'pino';
 * const logger: LoggerLike = pino();
 * ```
 */
export interface LoggerLike {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

const LEVELS = { info: 30, warn: 40, error: 50 } as const;

/** One JSON line per call, shaped like pino's, on stderr. @internal */
export const stderrLogger: LoggerLike = {
  info: (fields, message) => write(LEVELS.info, fields, message),
  warn: (fields, message) => write(LEVELS.warn, fields, message),
  error: (fields, message) => write(LEVELS.error, fields, message),
};

function write(level: number, fields: Record<string, unknown>, msg: string): void {
  const line: Record<string, unknown> = { level, time: Date.now(), ...fields, msg };
  if (line.err instanceof Error) {
    const { name, message, stack } = line.err;
    line.err = { type: name, message, stack };
  }
  let text: string;
  try {
    text = JSON.stringify(line);
  } catch {
    text = JSON.stringify({ level, time: line.time, msg, unserializable: true });
  }
  process.stderr.write(`${text}\n`);
}
