/**
 * The handshake every helper process of the bench uses (hello-server, server-process, the precision's silent
 * server): it prints `READY <port>` once listening on loopback.
 */
import type { ChildProcess } from 'node:child_process';

/** `http://127.0.0.1:<port>/` once `child` has printed `READY <port>`; throws `exitedMessage` if it exits first. */
export async function readyUrl(child: ChildProcess, exitedMessage: string): Promise<string> {
  let output = '';
  for await (const chunk of child.stdout as AsyncIterable<Buffer>) {
    output += chunk.toString();
    const port = /READY (\d+)/.exec(output)?.[1];
    if (port !== undefined) return `http://127.0.0.1:${port}/`;
  }
  throw new Error(exitedMessage);
}
