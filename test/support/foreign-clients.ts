/**
 * Clients no one here wrote, in other languages, for the RPC servers' tests (packages/grpc, packages/connect): Python's
 * grpcio (gRPC core, in C), curl and nghttp (both on nghttp2). They find out what our own clients cannot: a server's
 * answer to a deadline, read by a client whose own timer does not fire first. `scripts/install-test-tools.sh` installs
 * them. Under `CI=true` a missing tool fails the test file; elsewhere the tests are skipped with a message naming the
 * script (the policy of test/support/services.ts).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface ForeignClient {
  name: string;
  /** The executable, by absolute path where PATH may hold another (pyenv's python3 has no grpc). */
  command: string;
  /** Arguments that succeed only when the tool can do what the tests ask of it. */
  probe: string[];
  /** What its output must contain, besides the exit code 0. */
  expect?: RegExp;
}

/** Debian's python3 with `python3-grpcio`. */
export const PYTHON_GRPCIO: ForeignClient = {
  name: "Python's grpcio",
  command: '/usr/bin/python3',
  probe: ['-c', 'import grpc; print(grpc.__version__)'],
};

/** curl with HTTP/2 (for h2c prior knowledge and trailers). */
export const CURL: ForeignClient = { name: 'curl', command: 'curl', probe: ['--version'], expect: /\bHTTP2\b/ };

/** nghttp, nghttp2's client: `-v` prints every frame, trailers included. */
export const NGHTTP: ForeignClient = { name: 'nghttp', command: 'nghttp', probe: ['--version'] };

const INSTALL = 'scripts/install-test-tools.sh';

/** What a finished process said. */
export interface Ran {
  exitCode: number | null;
  stdout: string;
  stderr: string;
  /** When it was spawned and when it exited, on `performance.now()`'s clock. */
  startedAt: number;
  endedAt: number;
}

/** When a client sent its call, on `performance.now()`'s clock: what the server's figures are measured from. */
export interface Sent {
  sentAt: number;
}

/**
 * Runs `command` with `args`, `input` on its stdin; `onStdout` sees its output as it comes. Killed after `limitMs`
 * (a tool that hangs fails its test instead of the run). Never rejects for the tool's own failure: the exit code says.
 */
export function run(
  command: string,
  args: readonly string[],
  {
    input,
    limitMs = 20_000,
    onStdout,
  }: { input?: Uint8Array; limitMs?: number; onStdout?: (text: string) => void } = {},
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const startedAt = performance.now();
    const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'], timeout: limitMs, killSignal: 'SIGKILL' });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      onStdout?.(stdout);
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    child.once('error', reject);
    child.once('close', (exitCode) => resolve({ exitCode, stdout, stderr, startedAt, endedAt: performance.now() }));
    child.stdin.end(input);
  });
}

async function usable(client: ForeignClient): Promise<boolean> {
  try {
    const ran = await run(client.command, client.probe, { limitMs: 10_000 });
    return ran.exitCode === 0 && (client.expect === undefined || client.expect.test(ran.stdout));
  } catch {
    return false;
  }
}

/**
 * Resolves true when every client can run here. Otherwise: under CI, throws (the file fails); elsewhere, warns and
 * resolves false, for `describe.runIf(...)`.
 */
export async function requireForeignClients(...clients: ForeignClient[]): Promise<boolean> {
  const missing: string[] = [];
  for (const client of clients) if (!(await usable(client))) missing.push(`${client.name} (${client.command})`);
  if (missing.length === 0) return true;
  const message = `${missing.join(', ')} not found or not usable; install them with: ${INSTALL}`;
  if (process.env.CI) throw new Error(message);
  console.warn(`skipped: ${message}`);
  return false;
}

/** Headers as curl and nghttp print them, by lower-case name (the last of a repeated one). */
export type PrintedHeaders = Record<string, string>;

/**
 * The gRPC status fields of an answer: from its trailers, or from its headers when it is trailers-only (an answer
 * without a message: a refusal, a deadline before any reply).
 */
export interface GrpcStatusFields {
  status: string | undefined;
  message: string | undefined;
  /** Our `x-deadline-exceeded-by`. */
  exceededBy: string | undefined;
}

function grpcFields(headers: PrintedHeaders, trailers: PrintedHeaders): GrpcStatusFields {
  const from = trailers['grpc-status'] === undefined ? headers : trailers;
  return { status: from['grpc-status'], message: from['grpc-message'], exceededBy: from['x-deadline-exceeded-by'] };
}

function headerLines(lines: readonly string[]): PrintedHeaders {
  const headers: PrintedHeaders = {};
  for (const line of lines) {
    const at = line.indexOf(':', 1);
    if (at > 0) headers[line.slice(0, at).trim().toLowerCase()] = line.slice(at + 1).trim();
  }
  return headers;
}

/** What curl got: the HTTP status, headers, trailers, body, and its own time for the exchange. */
export interface CurlAnswer extends Sent {
  status: number;
  headers: PrintedHeaders;
  trailers: PrintedHeaders;
  grpc: GrpcStatusFields;
  body: Buffer;
  /** curl's `time_total`: from its start of the transfer to the last byte, in ms. */
  timeMs: number;
  ran: Ran;
}

/**
 * One HTTP/2 request with curl, cleartext with prior knowledge (as a gRPC client speaks to a server without TLS): `-D`
 * prints the response's headers, then a blank line, then its trailers.
 */
export async function curl(url: string, headers: Record<string, string>, body: Uint8Array): Promise<CurlAnswer> {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-curl-'));
  try {
    const args = ['-sS', '--http2-prior-knowledge', '--max-time', '20', '-X', 'POST'];
    for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}: ${value}`);
    const printed = join(dir, 'headers');
    const received = join(dir, 'body');
    args.push('--data-binary', '@-', '-D', printed, '-o', received, '-w', '%{time_total}', url);
    const ran = await run(CURL.command, args, { input: body });
    if (ran.exitCode !== 0) throw new Error(`curl failed (${ran.exitCode}): ${ran.stderr}`);
    const timeMs = Number(ran.stdout.trim()) * 1_000;
    const [head = '', ...rest] = (await readFile(printed, 'utf8')).split(/\r?\n\r?\n/);
    const [statusLine = '', ...lines] = head.split(/\r?\n/);
    const answered = headerLines(lines);
    const trailers = headerLines(rest.join('\n').split(/\r?\n/));
    return {
      status: Number(statusLine.split(' ')[1]),
      headers: answered,
      trailers,
      grpc: grpcFields(answered, trailers),
      body: await readFile(received),
      timeMs,
      // The transfer's start, by curl's own clock: its start-up (tens of ms) is not the server's business.
      sentAt: ran.endedAt - timeMs,
      ran,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** What curl got of a plain HTTP/1.1 GET: the status and headers (none if it gave up first), the body, its exit code. */
export interface CurlGetAnswer {
  status: number | undefined;
  headers: PrintedHeaders;
  body: string;
  /** 0, or 28 when `--max-time` ran out and curl closed the connection. */
  exitCode: number | null;
}

/**
 * One HTTP/1.1 GET with curl, as someone trying a service from a shell would: `headers` sent as given, and curl giving
 * up (closing the connection) after `maxTimeS` seconds.
 */
export async function curlGet(url: string, headers: Record<string, string>, maxTimeS = 20): Promise<CurlGetAnswer> {
  const args = ['-sS', '--http1.1', '--max-time', String(maxTimeS), '-D', '-', '-o', '-'];
  for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}: ${value}`);
  const ran = await run(CURL.command, [...args, url]);
  if (ran.exitCode !== 0 && ran.exitCode !== 28) throw new Error(`curl failed (${ran.exitCode}): ${ran.stderr}`);
  const [head = '', ...rest] = ran.stdout.split(/\r?\n\r?\n/);
  const [statusLine = '', ...lines] = head.split(/\r?\n/);
  const status = Number(statusLine.split(' ')[1]);
  return {
    status: Number.isInteger(status) ? status : undefined,
    headers: headerLines(lines),
    body: rest.join('\n\n'),
    exitCode: ran.exitCode,
  };
}

/** What nghttp got: the response's header block and its trailers (each a HEADERS frame it printed). */
export interface NghttpAnswer extends Sent {
  headers: PrintedHeaders;
  trailers: PrintedHeaders;
  grpc: GrpcStatusFields;
  ran: Ran;
}

/** One HTTP/2 POST with nghttp (`-v`: every frame it receives, with the fields of each HEADERS frame). */
export async function nghttp(url: string, headers: Record<string, string>, body: Uint8Array): Promise<NghttpAnswer> {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-nghttp-'));
  try {
    const data = join(dir, 'body');
    await writeFile(data, body);
    const args = ['-v', '-t', '20', '-d', data];
    for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}: ${value}`);
    const ran = await run(NGHTTP.command, [...args, url]);
    if (ran.exitCode !== 0) throw new Error(`nghttp failed (${ran.exitCode}): ${ran.stderr}`);
    // "[  0.002] recv (stream_id=13) grpc-status: 4", then the frame the fields came in.
    const blocks: string[][] = [[]];
    let lastStampS = 0;
    for (const line of ran.stdout.split('\n')) {
      const stamp = /^\[\s*([\d.]+)\]/.exec(line);
      if (stamp !== null) lastStampS = Number(stamp[1]);
      const field = /\] recv \(stream_id=\d+\) (.+)$/.exec(line);
      if (field !== null) (blocks.at(-1) as string[]).push(field[1] as string);
      else if (/\] recv HEADERS frame/.test(line)) blocks.push([]);
    }
    const [first = [], second = []] = blocks.filter((block) => block.length > 0);
    const answered = headerLines(first);
    const trailers = headerLines(second);
    // Its stamps count from its own start, after the process started: the last one is close to its exit.
    const sentAt = ran.endedAt - lastStampS * 1_000;
    return { headers: answered, trailers, grpc: grpcFields(answered, trailers), sentAt, ran };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const GRPCIO_CALL = fileURLToPath(new URL('./grpcio-call.py', import.meta.url));

/** What Python's grpcio said of a unary call: its status, trailing metadata, and its own time for the call. */
export interface GrpcioAnswer extends Sent {
  code: string;
  details: string;
  trailers: Record<string, string>;
  /** From just before the call to its status, on Python's monotonic clock, in ms (the channel already connected). */
  elapsedMs: number;
}

/**
 * One unary call with Python's grpcio (a generic `channel.unary_unary`, raw bytes in and out), with grpcio's own
 * `timeout` in seconds and `metadata` to send. It is sent when Python says it is about to call (its channel already
 * connected).
 */
export async function grpcio(
  target: string,
  method: string,
  request: Uint8Array,
  timeoutS: number,
  metadata: Record<string, string> = {},
): Promise<GrpcioAnswer> {
  let sentAt: number | undefined;
  const ran = await run(
    PYTHON_GRPCIO.command,
    [GRPCIO_CALL, target, method, String(timeoutS), Buffer.from(request).toString('hex'), JSON.stringify(metadata)],
    {
      onStdout(text) {
        if (sentAt === undefined && text.includes('calling\n')) sentAt = performance.now();
      },
    },
  );
  const last = ran.stdout.trim().split('\n').at(-1) ?? '';
  if (ran.exitCode !== 0 || !last.startsWith('{')) throw new Error(`grpcio failed (${ran.exitCode}): ${ran.stderr}`);
  return { ...(JSON.parse(last) as Omit<GrpcioAnswer, 'sentAt'>), sentAt: sentAt ?? ran.startedAt };
}
