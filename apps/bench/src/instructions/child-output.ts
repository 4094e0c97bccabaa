/**
 * What a counted process prints on stdout (instructions.ts), read line by line for its whole life: the lines it
 * prints itself (`READY <port>`, `WARM`, …) and, with `--trace-gc`, V8's line per garbage collection, of which the
 * young generation's are counted as they come.
 */
import type { ChildProcess } from 'node:child_process';

/** A line the process printed, and how many young-generation collections it had reported before it. */
export interface PrintedLine {
  match: RegExpExecArray;
  scavenges: number;
}

/** `[pid:isolate]  1651 ms: Scavenge 18.6 (29.6) -> …` (from Node 22: `Scavenge (interleaved) …`). */
const SCAVENGE_LINE = / ms: Scavenge\b/;

/**
 * Reads `child`'s stdout (one 'data' listener for its life: an async iterator over it would close the stream when
 * left, and the lines keep coming).
 *
 * @example
 * ```ts
 * const output = new ChildOutput(child, 'fastify');
 * const port = (await output.line(/^READY (\d+)$/)).match[1];
 * const before = output.scavenges;
 * ```
 */
export class ChildOutput {
  /** The young-generation collections reported so far. */
  scavenges = 0;
  readonly #what: string;
  readonly #lines: { text: string; scavenges: number }[] = [];
  readonly #waiting = new Set<() => void>();
  #pending = '';
  #exited = false;

  constructor(child: ChildProcess, what: string) {
    this.#what = what;
    child.stdout?.on('data', (chunk: Buffer) => {
      const lines = (this.#pending + chunk.toString()).split('\n');
      this.#pending = lines.pop() ?? '';
      for (const text of lines) {
        if (SCAVENGE_LINE.test(text)) this.scavenges++;
        else this.#lines.push({ text, scavenges: this.scavenges });
      }
      this.#wake();
    });
    child.once('exit', () => {
      this.#exited = true;
      this.#wake();
    });
  }

  /** The first line the process printed that matches `pattern`, once printed; rejects if it exits before. */
  line(pattern: RegExp): Promise<PrintedLine> {
    return new Promise<PrintedLine>((resolve, reject) => {
      const check = () => {
        const found = this.#find(pattern);
        if (found !== undefined) resolve(found);
        else if (this.#exited) reject(new Error(`${this.#what}: exited before printing ${pattern}`));
        else return;
        this.#waiting.delete(check);
      };
      this.#waiting.add(check);
      check();
    });
  }

  #find(pattern: RegExp): PrintedLine | undefined {
    for (const line of this.#lines) {
      const match = pattern.exec(line.text);
      if (match !== null) return { match, scavenges: line.scavenges };
    }
    return undefined;
  }

  #wake(): void {
    for (const check of this.#waiting) check();
  }
}
