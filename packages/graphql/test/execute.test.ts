/**
 * `deadlineExecute` around graphql-js's own `execute`, on whichever major this project resolves `graphql` to: 16 in
 * the `graphql` project, 17 in `graphql:graphql17`. On 17 the deadline is the execution's `abortSignal` (and
 * `info.getAbortSignal()` aborts with it); on both the answer is the data resolved so far and an error per field cut.
 */
import { runWithDeadline } from '@deadline/core';
import { buildSchema, execute, type GraphQLResolveInfo, parse, versionInfo } from 'graphql';
import { describe, expect, it } from 'vitest';
import { DEADLINE_EXCEEDED, deadlineExecute, instrumentSchema } from '../src/index.ts';

const schema = buildSchema(`
  type Query { fast: String, slow: String, later: Later }
  type Later { field: String }
`);
const seen = { slowSignalAborted: false, laterFieldRan: false };
const fields = schema.getQueryType()?.getFields() ?? {};
(fields.fast as { resolve?: unknown }).resolve = async () => 'fast';
(fields.slow as { resolve?: unknown }).resolve = (_: unknown, __: unknown, ___: unknown, info: GraphQLResolveInfo) =>
  new Promise<string>((resolve) => {
    const signal = (info as { getAbortSignal?: () => AbortSignal | undefined }).getAbortSignal?.();
    signal?.addEventListener('abort', () => {
      seen.slowSignalAborted = true;
    });
    setTimeout(resolve, 2_000, 'slow').unref();
  });
// A field that starts only after its parent, which resolves after the deadline: never started.
let laterParentResolved!: () => void;
const laterParent = new Promise<void>((resolve) => {
  laterParentResolved = resolve;
});
(fields.later as { resolve?: unknown }).resolve = () =>
  new Promise((resolve) =>
    setTimeout(() => {
      resolve({});
      laterParentResolved();
    }, 300).unref(),
  );
const laterFields = (schema.getType('Later') as { getFields(): Record<string, { resolve?: unknown }> }).getFields();
(laterFields.field as { resolve?: unknown }).resolve = () => {
  seen.laterFieldRan = true;
  return 'ran';
};
instrumentSchema(schema);

describe(`deadlineExecute on graphql ${versionInfo.major}`, () => {
  it('the deadline passes mid-operation: the data resolved so far, one error per field cut, no field started after', async () => {
    const run = deadlineExecute(execute);
    const started = performance.now();
    const result = await runWithDeadline(150, () => run({ schema, document: parse('{ fast slow later { field } }') }));
    const tookMs = performance.now() - started;
    expect(tookMs).toBeGreaterThanOrEqual(140);
    expect(tookMs).toBeLessThan(1_000);
    expect(result.data).toEqual({ fast: 'fast', slow: null, later: null });
    expect(result.errors?.map((error) => error.path)).toEqual(expect.arrayContaining([['slow'], ['later']]));
    for (const error of result.errors ?? []) expect(error.extensions?.code).toBe(DEADLINE_EXCEEDED);
    // Its parent resolved after all: the turn after, its field would have started.
    await laterParent;
    await new Promise(setImmediate);
    expect(seen.laterFieldRan).toBe(false);
    // graphql 17 hands resolvers the execution's signal: fed from the deadline, it aborted with it.
    expect(seen.slowSignalAborted).toBe(versionInfo.major >= 17);
  });

  it('outside any deadline it is graphql’s execute, untouched', async () => {
    const result = await deadlineExecute(execute)({ schema, document: parse('{ fast }') });
    expect(result).toEqual({ data: { fast: 'fast' } });
  });
});
