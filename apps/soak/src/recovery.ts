/**
 * Did the service come back after a fault, and how fast: its first answer in time once the fault cleared, and its
 * goodput (answers in time, per second) after the fault cleared against its goodput before the fault began. And did
 * the requests that had enough budget keep their latency: their p99 before the faults against after.
 */

/** One request of the soak's load, as its client saw it (times in ms on one clock). */
export interface LoadRecord {
  sentAt: number;
  /** When it was answered, or given up on. */
  doneAt: number;
  /** Answered in time with a success. */
  ok: boolean;
  /** Sent with a budget the work fits in (not one of the load's budgets too small to finish). */
  enoughBudget: boolean;
}

/** A fault's span on the same clock. */
export interface FaultSpan {
  startedAt: number;
  clearedAt: number;
}

export interface RecoveryOptions {
  /** The share of the goodput before the fault that counts as back. Default 0.9. */
  share?: number;
  /** Goodput is counted in buckets this long. Default 500 ms. */
  bucketMs?: number;
  /** The goodput before the fault is read over this long before it began. Default 10 s. */
  beforeMs?: number;
  /** Back means back for this long: every bucket in it at the share or more. Default 1 s. */
  holdMs?: number;
}

/**
 * How long after `fault` cleared the goodput was back to `share` of its level before the fault (ms), or `null` when
 * it never was within the records (or there was no goodput before the fault to compare with).
 *
 * @example
 * ```ts
 * const ms = recoveryMs(records, { startedAt: 60_000, clearedAt: 90_000 });
 * if (ms === null || ms > 2_000) console.log('not back within 2 s');
 * ```
 */
export function recoveryMs(
  records: readonly LoadRecord[],
  fault: FaultSpan,
  options: RecoveryOptions = {},
): number | null {
  const share = options.share ?? 0.9;
  const bucketMs = options.bucketMs ?? 500;
  const beforeMs = options.beforeMs ?? 10_000;
  const holdMs = options.holdMs ?? 1_000;
  const before = okPerSecond(records, fault.startedAt - beforeMs, fault.startedAt);
  if (!(before > 0)) return null;
  // A loop, not a spread: a soak's records run to tens of thousands, past what a call's arguments may hold.
  let last = Number.NEGATIVE_INFINITY;
  for (const r of records) if (r.doneAt > last) last = r.doneAt;
  const buckets = Math.ceil(holdMs / bucketMs);
  for (let from = fault.clearedAt; from + buckets * bucketMs <= last; from += bucketMs) {
    let held = true;
    for (let i = 0; i < buckets && held; i++) {
      const start = from + i * bucketMs;
      held = okPerSecond(records, start, start + bucketMs) >= share * before;
    }
    if (held) return from - fault.clearedAt;
  }
  return null;
}

/**
 * How long after `fault` cleared the first answer in time came (ms) to a call made since the fault began, among
 * those that went `through` what broke; `null` when none came within the records. Read off what the service did
 * rather than off a level on the clock: a call made once the fault had begun and answered in time after it cleared
 * did its work on what came back (a restarted server's new sessions, since a fast shutdown ends the old ones; a
 * continued process; a restored link), and a busy machine makes fewer such answers, not later ones: an answer in
 * time lands within its call's budget.
 *
 * @example
 * ```ts
 * const ms = firstAnswerMs(records, { startedAt: 60_000, clearedAt: 60_400 }, (r) => r.enoughBudget);
 * if (ms === null) console.log('nothing made since the restart began was answered in time');
 * ```
 */
export function firstAnswerMs<R extends LoadRecord>(
  records: readonly R[],
  fault: FaultSpan,
  through: (record: R) => boolean = () => true,
): number | null {
  let first = Number.POSITIVE_INFINITY;
  for (const r of records) {
    if (r.ok && r.sentAt >= fault.startedAt && r.doneAt >= fault.clearedAt && r.doneAt < first && through(r)) {
      first = r.doneAt;
    }
  }
  return Number.isFinite(first) ? first - fault.clearedAt : null;
}

/**
 * The longest wait for an answer in time in [from, to) (ms), among the records `through` what is asked: from `from`
 * to the first answer, between two, from the last to `to` (all of it when there is none). The pace of a service's
 * answers before a fault, on this machine in this run: what its first answer after the fault may take beyond the
 * fault's own.
 *
 * @example
 * ```ts
 * const pace = longestWaitMs(records, fault.startedAt - 10_000, fault.startedAt, (r) => r.enoughBudget);
 * ```
 */
export function longestWaitMs<R extends LoadRecord>(
  records: readonly R[],
  from: number,
  to: number,
  through: (record: R) => boolean = () => true,
): number {
  const answers: number[] = [];
  for (const r of records) if (r.ok && r.doneAt >= from && r.doneAt < to && through(r)) answers.push(r.doneAt);
  answers.sort((a, b) => a - b);
  let longest = 0;
  let previous = from;
  for (const at of [...answers, to]) {
    longest = Math.max(longest, at - previous);
    previous = at;
  }
  return longest;
}

/** Answers in time per second among the records done in [from, to). */
export function okPerSecond(records: readonly LoadRecord[], from: number, to: number): number {
  if (!(to > from)) return 0;
  let ok = 0;
  for (const r of records) if (r.ok && r.doneAt >= from && r.doneAt < to) ok++;
  return ok / ((to - from) / 1000);
}

/**
 * The p99 latency (ms) of the requests sent in [from, to) with enough budget and answered in time; `null` when there
 * are none.
 *
 * @example
 * ```ts
 * const before = p99WithEnoughBudget(records, 0, firstFaultAt);
 * const after = p99WithEnoughBudget(records, lastFaultClearedAt + 10_000, end);
 * ```
 */
export function p99WithEnoughBudget(records: readonly LoadRecord[], from: number, to: number): number | null {
  const latencies = records
    .filter((r) => r.enoughBudget && r.ok && r.sentAt >= from && r.sentAt < to)
    .map((r) => r.doneAt - r.sentAt)
    .sort((a, b) => a - b);
  if (latencies.length === 0) return null;
  return latencies[Math.min(latencies.length - 1, Math.ceil(0.99 * latencies.length) - 1)] as number;
}
