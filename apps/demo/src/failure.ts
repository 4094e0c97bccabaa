/**
 * A demo that fails says why in one line: the step it was at and the error, causes included, with the stack in a
 * file beside the report for whoever wants it. A failure of the machine (SetupError) says only its own message.
 */

/**
 * `error` in one line: its name and message, then each cause's (`← caused by`), an AggregateError's errors, and the
 * system's code when the message does not carry it. Whitespace collapsed; never empty.
 */
export function describeFailure(error: unknown, depth = 0): string {
  if (!(error instanceof Error)) return oneLine(String(error)) || 'a value that is not an Error was thrown';
  const code = (error as { code?: unknown }).code;
  let text = `${error.name}: ${oneLine(error.message) || '(no message)'}`;
  if (typeof code === 'string' && !text.includes(code)) text += ` [${code}]`;
  if (error instanceof AggregateError && error.errors.length > 0 && depth < 3) {
    text += ` (${error.errors.map((each) => describeFailure(each, depth + 1)).join('; ')})`;
  }
  if (error.cause !== undefined && depth < 3) text += ` ← caused by ${describeFailure(error.cause, depth + 1)}`;
  return text;
}

/** The stack of `error` and of each of its causes, for the details file. */
export function failureDetails(error: unknown): string {
  const parts: string[] = [];
  for (let at: unknown = error, depth = 0; at !== undefined && depth < 5; depth++) {
    parts.push(at instanceof Error ? (at.stack ?? `${at.name}: ${at.message}`) : String(at));
    at = at instanceof Error ? at.cause : undefined;
  }
  return `${parts.join('\n\ncaused by:\n')}\n`;
}

function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}
