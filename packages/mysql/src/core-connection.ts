/**
 * The mysql2 connection behind a promise one: the object that emits its events, owns its socket and keeps its
 * handshake. Typed on pool connections only in mysql2's declarations, there on every one.
 */
import type { Socket } from 'node:net';
import type { Connection as CoreConnection } from 'mysql2';
import type { Connection } from 'mysql2/promise';

/** @internal What this package reads of a mysql2 connection besides its declared API. */
export type Core = CoreConnection & {
  stream?: Socket;
  /** Set once the server has accepted the login. */
  authorized?: boolean;
  _handshakePacket?: { serverVersion?: unknown } | null;
  /** The command the connection runs now. */
  _command?: DriverCommand | null;
  /** The commands queued behind it (a Denque): `execute()` queues its Execute behind its Prepare. */
  _commands?: { peekBack?: () => DriverCommand | undefined };
};

/** @internal A mysql2 command (Query, Execute): `onResult` is the callback it answers through. */
export interface DriverCommand {
  onResult?: ((error: unknown, ...rest: unknown[]) => unknown) | null;
}

/** @internal */
export function coreOf(connection: Connection): Core {
  return (connection as unknown as { connection: Core }).connection;
}

/**
 * @internal Has `callback` hear the error of the command last given to the connection (the statement just sent)
 * before that command answers: before the caller's callback and any instrumentation wrapped around it (a mysql2
 * OpenTelemetry span ends there). Does nothing on a connection that is not mysql2's.
 */
export function beforeCommandAnswers(connection: Connection, callback: (error: unknown) => void): void {
  const core = coreOf(connection);
  const command = core?._commands?.peekBack?.() ?? core?._command;
  const answer = command?.onResult;
  if (command == null || typeof answer !== 'function') return;
  command.onResult = function (this: unknown, error: unknown, ...rest: unknown[]) {
    if (error != null) callback(error);
    return answer.call(this, error, ...rest);
  };
}
