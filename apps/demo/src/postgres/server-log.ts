/**
 * What a PostgreSQL process writes on stderr, read for as long as it runs (an unread pipe would fill and stall
 * the server): the last lines are kept, to say in one line why it stopped or would not start.
 */
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';

const KEPT = 30;

export class ServerLog {
  readonly lines: string[] = [];

  constructor(stream: Readable, onLine: (line: string) => void = () => {}) {
    createInterface({ input: stream }).on('line', (line) => {
      this.lines.push(line);
      if (this.lines.length > KEPT) this.lines.shift();
      onLine(line);
    });
  }

  /** The port was taken (by something that started since it was chosen, or was given). */
  portInUse(): boolean {
    return this.lines.some((line) => line.includes('Address already in use'));
  }

  /** The most telling line: the last FATAL/PANIC/ERROR one, without its timestamp and pid; else the last one. */
  reason(): string | undefined {
    const telling = this.lines.findLast((line) => /\b(FATAL|PANIC|ERROR):/.test(line)) ?? this.lines.at(-1);
    return telling?.replace(/^.*?\b(FATAL|PANIC|ERROR|LOG):\s+/, '').trim();
  }
}
