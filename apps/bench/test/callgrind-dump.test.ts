/**
 * The callgrind dump reader: the total, and the cost under a chosen set of functions, on dumps written the way
 * callgrind writes them (compressed names, calls with their inclusive cost) — one by hand, and random call
 * trees whose answer is known.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { readDump } from '../src/instructions/callgrind-dump.ts';

const HEADER = 'version: 1\ncreator: callgrind-3.22.0\npid: 1\ncmd: node\npart: 1\n\npositions: line\nevents: Ir\n';

describe('readDump', () => {
  it('adds the calls into chosen functions from outside them, once, and reads the total', () => {
    const dump = `${HEADER}summary: 1000
ob=(1) /usr/bin/node
fl=(1) ???
fn=(1) Builtins_JSEntry
0 100
cfn=(2) v8::internal::Runtime_CompileLazy(int, unsigned long*, v8::internal::Isolate*)
calls=1 0
0 300
cfn=(3) Builtins_Call
calls=2 0
0 600

fn=(2)
0 50
cfn=(4) v8::internal::Runtime_CompileOptimized(int, unsigned long*, v8::internal::Isolate*)
calls=1 0
0 250

fn=(3)
0 200
cfn=(4)
calls=1 0
+2 400

fn=(4)
0 650

totals: 1000
`;
    // 300 (JSEntry → CompileLazy) + 400 (Call → CompileOptimized); CompileLazy's own call into CompileOptimized
    // is inside the first 300 already.
    expect(readDump(dump, /Runtime_Compile/)).toEqual({ total: 1000, under: 700, calls: 2 });
    expect(readDump(dump, /nothing matches this/)).toEqual({ total: 1000, under: 0, calls: 0 });
  });

  it('rejects a file that is not a dump', () => {
    expect(() => readDump('hello\n', /x/)).toThrow(/not a callgrind dump/);
  });

  // A random call tree, written as callgrind writes it (each function's calls aggregated by callee), whose
  // cost under the chosen functions is also summed directly on the tree.
  interface Node {
    fn: number;
    self: number;
    children: Node[];
  }
  const treeOf = (depth: number): fc.Arbitrary<Node> =>
    fc.record({
      fn: fc.integer({ min: 0, max: 7 }),
      self: fc.integer({ min: 0, max: 1000 }),
      children: depth === 0 ? fc.constant([]) : fc.array(treeOf(depth - 1), { maxLength: 3 }),
    });
  const tree = treeOf(4);
  const inclusive = (node: Node): number => node.children.reduce((sum, child) => sum + inclusive(child), node.self);
  const chosenFns = new Set([1, 4]);
  const name = (fn: number) => (chosenFns.has(fn) ? `v8::internal::Runtime_Chosen${fn}(int)` : `Builtins_Other${fn}`);

  function write(root: Node): string {
    // fn → its self cost, and (callee → [count, inclusive cost]) of its calls: what a dump aggregates.
    const self = new Map<number, number>();
    const calls = new Map<number, Map<number, [number, number]>>();
    const visit = (node: Node) => {
      self.set(node.fn, (self.get(node.fn) ?? 0) + node.self);
      for (const child of node.children) {
        const edges = calls.get(node.fn) ?? new Map<number, [number, number]>();
        const [count, cost] = edges.get(child.fn) ?? [0, 0];
        edges.set(child.fn, [count + 1, cost + inclusive(child)]);
        calls.set(node.fn, edges);
        visit(child);
      }
    };
    visit(root);
    const seen = new Set<number>();
    const compressed = (fn: number) => {
      if (seen.has(fn)) return `(${fn + 1})`;
      seen.add(fn);
      return `(${fn + 1}) ${name(fn)}`;
    };
    let text = `${HEADER}ob=(1) /usr/bin/node\nfl=(1) ???\n`;
    for (const [fn, cost] of self) {
      text += `fn=${compressed(fn)}\n0 ${cost}\n`;
      for (const [callee, [count, cost]] of calls.get(fn) ?? []) {
        text += `cfn=${compressed(callee)}\ncalls=${count} 0\n0 ${cost}\n`;
      }
      text += '\n';
    }
    return `${text}totals: ${inclusive(root)}\n`;
  }

  // Only trees where no chosen function calls a function outside the set that calls back into it: the reader
  // sees aggregated edges, not stacks (V8's compiler entries never nest, which is what makes this hold). And a
  // root outside the set, as in a real dump (the event loop).
  const nestsThroughOthers = (node: Node, insideChosen: boolean, leftChosen: boolean): boolean => {
    const chosen = chosenFns.has(node.fn);
    if (chosen && leftChosen) return true;
    return node.children.some((child) =>
      nestsThroughOthers(child, insideChosen || chosen, leftChosen || (insideChosen && !chosen)),
    );
  };
  const underChosen = (node: Node, inside: boolean): number =>
    !inside && chosenFns.has(node.fn)
      ? inclusive(node)
      : node.children.reduce((sum, child) => sum + underChosen(child, inside || chosenFns.has(node.fn)), 0);
  const callsIntoChosen = (node: Node, inside: boolean): number =>
    !inside && chosenFns.has(node.fn)
      ? 1
      : node.children.reduce((sum, child) => sum + callsIntoChosen(child, inside || chosenFns.has(node.fn)), 0);

  it('finds, on any call tree, the cost under the chosen functions and the calls into them', () => {
    fc.assert(
      fc.property(
        tree.filter((root) => !chosenFns.has(root.fn) && !nestsThroughOthers(root, false, false)),
        (root) => {
          expect(readDump(write(root), /Runtime_Chosen/)).toEqual({
            total: inclusive(root),
            under: underChosen(root, false),
            calls: callsIntoChosen(root, false),
          });
        },
      ),
    );
  });
});
