/**
 * Reading a callgrind dump (the text format of valgrind's `callgrind_format` documentation): its total, and
 * how much of it was spent under a chosen set of functions.
 *
 * Why the second: V8 keeps tiering code up long after a warm-up (on Node 24, fastify's `Readable.read` reaches
 * TurboFan after ~30,000 requests, one compile of ~9M instructions). With `--single-threaded` that compile runs
 * on the main thread, inside whichever window it falls in: 1.8k per request in a window of 5,000, more in a
 * shorter one. A service that has run for an hour compiles nothing per request, so the counts leave the JIT's
 * work out, and report it beside them.
 */

/** What one dump holds: its total, and the part spent under the functions asked about. */
export interface DumpCost {
  /** Every instruction counted in the window (`totals:`). */
  total: number;
  /** Instructions spent in calls into the chosen functions, from outside them (nested calls counted once). */
  under: number;
  /** How many calls those were. */
  calls: number;
}

/** A compressed name (`(12) name` the first time, `(12)` after) resolved through the dump's table. */
function nameOf(field: string, names: Map<string, string>): string {
  const match = /^\((\d+)\)(?: (.*))?$/.exec(field);
  if (match === null) return field;
  const [, id, name] = match as unknown as [string, string, string | undefined];
  if (name !== undefined) names.set(id, name);
  return names.get(id) ?? '';
}

/**
 * The total of `dump` (a callgrind output file's text, events `Ir`) and the instructions spent under functions
 * whose names `chosen` matches: each call from a function outside the set into one inside it adds its
 * inclusive cost, so nested calls are not counted twice; and how many such calls there were.
 *
 * @example
 * const { total, under } = readDump(await readFile('callgrind.out.1', 'utf8'), /v8::internal::Compiler::/);
 */
export function readDump(dump: string, chosen: RegExp): DumpCost {
  // `fn=` and `cfn=` share one table of compressed names.
  const names = new Map<string, string>();
  let total = Number.NaN;
  let under = 0;
  let calls = 0;
  let callerChosen = false;
  let calleeChosen = false;
  let callCostNext = false;
  for (const line of dump.split('\n')) {
    if (callCostNext) {
      // The line after `calls=`: a position, then the call's inclusive cost.
      callCostNext = false;
      if (!callerChosen && calleeChosen) under += Number(line.split(' ')[1] ?? 0);
    } else if (line.startsWith('fn=')) {
      callerChosen = chosen.test(nameOf(line.slice(3), names));
    } else if (line.startsWith('cfn=')) {
      calleeChosen = chosen.test(nameOf(line.slice(4), names));
    } else if (line.startsWith('calls=')) {
      callCostNext = true;
      // `calls=<count> <target position>`
      if (!callerChosen && calleeChosen) calls += Number(line.slice('calls='.length).split(' ')[0]);
    } else if (line.startsWith('totals:')) {
      total = Number(line.slice('totals:'.length).trim().split(/\s+/)[0]);
    }
  }
  if (!Number.isFinite(total)) throw new Error('not a callgrind dump: no totals line');
  return { total, under, calls };
}
