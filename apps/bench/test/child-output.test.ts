/**
 * The reader of a counted process's stdout: its own lines found with the young-generation collections `--trace-gc`
 * reported before each, however the output is cut into chunks — on a real process, and on any cutting of a
 * written output.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChildOutput } from '../src/instructions/child-output.ts';

/** What Node 20 and Node 22 on print per collection. */
const SCAVENGE_20 = '[9181:0x2f108000]     1651 ms: Scavenge 18.6 (29.6) -> 12.2 (29.6) MB, 0.18 / 0.00 ms  task;';
const SCAVENGE_22 =
  '[9181:0x2f108000:0]   1668 ms: Scavenge (interleaved) 18.6 (29.6) -> 12.2 (29.6) MB, pooled: 0 MB;';
const MARK = '[9181:0x2f108000]     1700 ms: Mark-Compact 20.1 (30.1) -> 13.0 (30.1) MB, 8.74 / 0.00 ms  testing;';

/** A process's stand-in whose stdout is written by the test. */
function fakeChild(): { child: ChildProcess; stdout: PassThrough; exit(): void } {
  const stdout = new PassThrough();
  const child = Object.assign(new EventEmitter(), { stdout }) as unknown as ChildProcess;
  return { child, stdout, exit: () => child.emit('exit', 0, null) };
}

describe('ChildOutput', () => {
  it("finds a real process's lines, with the collections it reported before each", async () => {
    const script = `
      let keep = [];
      for (let i = 0; i < 200000; i++) keep.push({ i });
      keep = null;
      console.log('HALF 1');
      let more = [];
      for (let i = 0; i < 200000; i++) more.push({ i });
      console.log('DONE 2');
    `;
    const child = spawn(process.execPath, ['--trace-gc', '--max-semi-space-size=1', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const output = new ChildOutput(child, 'allocator');
    const half = await output.line(/^HALF (\d+)$/);
    const done = await output.line(/^DONE (\d+)$/);
    expect(half.match[1]).toBe('1');
    expect(half.scavenges).toBeGreaterThan(0);
    expect(done.scavenges).toBeGreaterThan(half.scavenges);
  });

  it('rejects, naming the process, when it exits without printing the line', async () => {
    const { child, stdout, exit } = fakeChild();
    const output = new ChildOutput(child, 'server');
    stdout.write('starting\n');
    const waiting = output.line(/^READY (\d+)$/);
    exit();
    await expect(waiting).rejects.toThrow(/server: exited before printing/);
  });

  it('reads the same whatever chunks the output comes in', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.constantFrom(SCAVENGE_20, SCAVENGE_22, MARK, 'READY 4321', 'WARM', 'other'), { maxLength: 30 }),
        fc.array(fc.nat(), { maxLength: 10 }),
        async (lines, cuts) => {
          const text = `${[...lines, 'END'].join('\n')}\n`;
          const at = [...new Set(cuts.map((cut) => cut % text.length))].sort((a, b) => a - b);
          const { child, stdout } = fakeChild();
          const output = new ChildOutput(child, 'any');
          let from = 0;
          for (const to of [...at, text.length]) {
            stdout.write(text.slice(from, to));
            from = to;
          }
          await output.line(/^END$/);
          const scavenges = lines.filter((line) => line === SCAVENGE_20 || line === SCAVENGE_22).length;
          expect(output.scavenges).toBe(scavenges);
          const ready = lines.indexOf('READY 4321');
          if (ready >= 0) {
            const found = await output.line(/^READY (\d+)$/);
            expect(found.match[1]).toBe('4321');
            expect(found.scavenges).toBe(
              lines.slice(0, ready).filter((line) => line === SCAVENGE_20 || line === SCAVENGE_22).length,
            );
          }
        },
      ),
    );
  });
});
