/**
 * How late this process's event loop ran while some work ran, measured by the run itself. The servers of a test run
 * in the test's own process: a server gets to a request, arms its timers on the loop's clock, and answers no sooner
 * than its loop lets it, and the test reads its clients' answers no sooner either. On a loaded machine the process
 * waits for a core now and then, tens or hundreds of ms at a time (700 ms was seen with three test files and a busy
 * loop on two cores). A bound on when something happened can then be widened by what the loop lost, read here, and a
 * race that a server on time always wins can be required to be won when the loop was on time.
 */

/** How often the loop is sampled (ms). */
const SAMPLE_MS = 5;
/**
 * A sample later than this is a stall: the loop was unavailable (the process waited for a core, or a long turn ran).
 * Below it is a timer's ordinary jitter (whole milliseconds), which summed over thousands of samples would count as
 * lost time that was not.
 */
const STALL_MS = 10;

/** What {@link watchingTheLoop} saw. */
export interface Watched<T> {
  /** What the work resolved to. */
  value: T;
  /**
   * The loop's worst lateness, in ms: the longest a sample waited past its time, plus the sampling interval (a late
   * turn that began between samples shows less than its length by up to that much).
   */
  worstMs: number;
  /** The loop's stalls added up, in ms: time the work's timers and I/O could not run, however it was spread. */
  stalledMs: number;
}

/** Runs `work` while sampling how late this process's event loop runs. */
export async function watchingTheLoop<T>(work: () => Promise<T>): Promise<Watched<T>> {
  let last = performance.now();
  let worst = 0;
  let stalled = 0;
  const sample = () => {
    const now = performance.now();
    const late = now - last - SAMPLE_MS;
    last = now;
    if (late > worst) worst = late;
    if (late > STALL_MS) stalled += late;
  };
  const sampler = setInterval(sample, SAMPLE_MS);
  try {
    const value = await work();
    // A stall in the work's last turn ended it before the sampler ran again: one more sample sees it.
    sample();
    return { value, worstMs: worst + SAMPLE_MS, stalledMs: stalled };
  } finally {
    clearInterval(sampler);
  }
}
