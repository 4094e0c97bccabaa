/** What the adapters report through the `deadline:call:*` diagnostics channels: every call started is ended. */
import diagnostics from 'node:diagnostics_channel';
import { type CallEndMessage, DiagnosticsChannel } from '@deadline/core';

/** Runs `run` (its failure ignored) and returns the call events it caused: `start`, `end <outcome> <status>`. */
export async function calls(run: () => Promise<unknown>): Promise<string[]> {
  const events: string[] = [];
  const onStart = () => events.push('start');
  const onEnd = (message: unknown) => {
    const { outcome, statusCode } = message as CallEndMessage;
    events.push(`end ${outcome} ${statusCode ?? '-'}`);
  };
  diagnostics.subscribe(DiagnosticsChannel.CallStart, onStart);
  diagnostics.subscribe(DiagnosticsChannel.CallEnd, onEnd);
  try {
    await run().catch(() => {});
  } finally {
    diagnostics.unsubscribe(DiagnosticsChannel.CallStart, onStart);
    diagnostics.unsubscribe(DiagnosticsChannel.CallEnd, onEnd);
  }
  return events;
}
