/**
 * What the NATS tests share: a connection to the shared server, subjects unique to one file's run (the server is
 * shared with other files and runs), the dropped-message events as they are published, and one-line loggers.
 */
import { randomUUID } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import { DiagnosticsChannel, type MessageDroppedMessage, runWithContext, traceFrom } from '@deadline/core';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { NATS } from '../../../test/support/services.ts';

/** A subject prefix of this file's own. */
export function runPrefix(file: string): string {
  return `deadline-test.${file}.${randomUUID().slice(0, 8)}`;
}

export const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
export const TRACEPARENT = `00-${TRACE_ID}-00f067aa0ba902b7-01`;

/** Runs `fn` in a request's deadline context of `budgetMs` (hop `gateway`, the test's trace). */
export function inRequest<T>(budgetMs: number | undefined, fn: () => T): T {
  return runWithContext({ deadline: budgetMs, hop: 'gateway', trace: traceFrom(TRACEPARENT), root: true }, fn);
}

export function connectNats(url = NATS.url): Promise<NatsConnection> {
  return connect({ servers: url, name: 'deadline-nats-test' });
}

/** The `deadline:message:dropped` events published while it listens. */
export class Dropped {
  readonly events: MessageDroppedMessage[] = [];
  readonly #waiting: {
    match: (event: MessageDroppedMessage) => boolean;
    resolve: (event: MessageDroppedMessage) => void;
  }[] = [];
  readonly #listener = (message: unknown) => {
    const event = message as MessageDroppedMessage;
    this.events.push(event);
    for (const waiter of [...this.#waiting]) {
      if (waiter.match(event)) {
        this.#waiting.splice(this.#waiting.indexOf(waiter), 1);
        waiter.resolve(event);
      }
    }
  };

  constructor() {
    diagnostics.subscribe(DiagnosticsChannel.MessageDropped, this.#listener);
  }

  /** The first event (already seen, or to come) for `target` with `reason`. */
  next(target: string, reason: MessageDroppedMessage['reason']): Promise<MessageDroppedMessage> {
    const match = (event: MessageDroppedMessage) => event.target === target && event.reason === reason;
    const seen = this.events.find(match);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve) => this.#waiting.push({ match, resolve }));
  }

  count(target: string, reason: MessageDroppedMessage['reason']): number {
    return this.events.filter((event) => event.target === target && event.reason === reason).length;
  }

  close(): void {
    diagnostics.unsubscribe(DiagnosticsChannel.MessageDropped, this.#listener);
  }
}

export interface Line {
  level: 'info' | 'warn';
  object: Record<string, unknown>;
  message: string;
}

/** A logger keeping its lines; `line(method)` waits for the line of a message to `method`. */
export class MemoryLogger {
  readonly lines: Line[] = [];
  readonly #waiting: { method: string; resolve: (line: Line) => void }[] = [];

  info(object: object, message: string): void {
    this.#add({ level: 'info', object: object as Record<string, unknown>, message });
  }
  warn(object: object, message: string): void {
    this.#add({ level: 'warn', object: object as Record<string, unknown>, message });
  }

  #add(line: Line): void {
    this.lines.push(line);
    const at = this.#waiting.findIndex((waiter) => waiter.method === line.object.method);
    if (at !== -1) this.#waiting.splice(at, 1)[0]?.resolve(line);
  }

  /** The first line for `method` (each test has subjects of its own), written already or to come. */
  line(method: string): Promise<Line> {
    const seen = this.lines.find((line) => line.object.method === method);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve) => this.#waiting.push({ method, resolve }));
  }
}

/** A promise and its resolver, for a test to wait on an event instead of a delay. */
export function signal<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
