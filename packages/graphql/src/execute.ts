/**
 * graphql-js's `execute` fed from the request's deadline, for servers that call it themselves (graphql-http, yoga's
 * `useEngine`, a handler of your own). graphql 17 takes an `abortSignal`: from the deadline's, its execution starts
 * no new field once time is up and `info.getAbortSignal()` aborts with it. Aborted, graphql 17 throws
 * `AbortedGraphQLExecutionError` instead of answering; the error carries the result of the fields that did finish
 * (those in flight are cut by the resolvers' wrappers the moment the deadline passes), and that is what this returns:
 * the data resolved so far, an error for each field cut. graphql 16 takes no signal: the wrappers alone stop new
 * fields from starting.
 */
import { currentContext } from '@deadline/core';
import { currentSlot } from './request-slots.js';

/**
 * `execute`, fed the request's deadline as its `abortSignal` (graphql 17), answering with the data resolved so far
 * when the deadline aborts it.
 *
 * @example
 * ```ts
 * import { execute } from 'graphql';
 * import { createHandler } from 'graphql-http/lib/use/express';
 * import { deadlineExecute } from '@deadline/graphql';
 *
 * app.use('/graphql', deadline({ serviceName: 'catalog' }), createHandler({ schema, execute: deadlineExecute(execute) }));
 * ```
 */
export function deadlineExecute<Args extends object, Result>(execute: (args: Args) => Result): (args: Args) => Result {
  return function executeUnderDeadline(args: Args): Result {
    const context = currentContext() ?? currentSlot()?.state?.context;
    // No deadline, a signal of the caller's own, or time already gone (the wrappers refuse every field then).
    if (context === undefined || context.stopReason !== undefined) return execute(args);
    if ((args as { abortSignal?: unknown }).abortSignal != null) return execute(args);
    const signal = context.signal;
    if (signal === undefined) return execute(args);
    let result: Result;
    try {
      result = execute({ ...args, abortSignal: signal });
    } catch (error) {
      return abortedResultOf(error, signal) as Result;
    }
    if (typeof (result as PromiseLike<unknown> | null)?.then !== 'function') return result;
    return (result as Promise<unknown>).then(undefined, (error: unknown) => abortedResultOf(error, signal)) as Result;
  };
}

/** The partial result an execution aborted by `signal` carries; any other error is thrown on. */
function abortedResultOf(error: unknown, signal: AbortSignal): unknown {
  if (signal.aborted && typeof error === 'object' && error !== null && 'abortedResult' in error) {
    return (error as { abortedResult: unknown }).abortedResult;
  }
  throw error;
}
