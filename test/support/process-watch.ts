/**
 * What reaches the process while a fault test runs. An `'error'` event nobody listens to is thrown and ends a
 * real Node process; vitest catches it and fails the run, but a test should say so itself, next to what it
 * checks. Recorded: uncaught exceptions, unhandled rejections, and ioredis's "Unhandled error event" line (it
 * prints that instead of throwing when a connection with no `'error'` listener fails).
 */
import { afterEach, beforeEach, expect } from 'vitest';

/** What {@link watchProcess} returns: what was seen so far, and how to stop watching. */
export interface ProcessWatch {
  readonly seen: unknown[];
  stop(): void;
}

/** Starts recording what reaches the process; `stop()` undoes it all. */
export function watchProcess(): ProcessWatch {
  const seen: unknown[] = [];
  const record = (error: unknown) => seen.push(error);
  process.on('uncaughtException', record);
  process.on('unhandledRejection', record);
  const consoleError = console.error;
  console.error = (...args: unknown[]) => {
    if (String(args[0]).includes('Unhandled error event')) seen.push(args.join(' '));
    consoleError(...args);
  };
  return {
    seen,
    stop() {
      process.off('uncaughtException', record);
      process.off('unhandledRejection', record);
      console.error = consoleError;
    },
  };
}

/** Runs `test` under {@link watchProcess} and checks that nothing reached the process. */
export async function expectProcessLives(test: () => Promise<void>, describe: (error: unknown) => string = String) {
  const watch = watchProcess();
  try {
    await test();
  } finally {
    watch.stop();
  }
  expect(watch.seen.map(describe)).toEqual([]);
}

/**
 * In the `describe` it is called in: each test runs under {@link watchProcess}, and fails if anything reached the
 * process meanwhile.
 */
export function expectEachTestLives(): void {
  let watch: ProcessWatch | undefined;
  beforeEach(() => {
    watch = watchProcess();
  });
  afterEach(() => {
    watch?.stop();
    expect(watch?.seen).toEqual([]);
  });
}
