/**
 * Headers for a message this package adds its own to. NATS headers are a protocol format (`NATS/1.0[ code
 * description]`, then MIME lines), and both clients' `publish()` only ask the headers object to `encode()` itself:
 * so no client library is loaded, or guessed at, to make one. The app's own headers are copied, never changed (it
 * may publish the same object again outside any deadline). JetStream's `publish()` sets its own (`Nats-Msg-Id`, …)
 * on what it is given, so the common `MsgHdrs` methods are here too.
 */
import type { NatsHeadersLike } from './nats-types.js';

const encoder = new TextEncoder();

/** @internal */
export class OutgoingHeaders implements NatsHeadersLike {
  readonly #entries = new Map<string, string[]>();
  #code = 0;
  #description = '';

  /** A copy of `base` (the app's headers, or none), with its status line. */
  constructor(base?: NatsHeadersLike, code = 0, description = '') {
    this.#code = code;
    this.#description = description;
    if (base === undefined) return;
    for (const [name, values] of base) this.#entries.set(name, [...values]);
    if (code === 0 && typeof base.code === 'number') {
      this.#code = base.code;
      this.#description = base.description ?? '';
    }
  }

  /** Sets one of ours: any header of the same name in another case goes (NATS names are case-sensitive). */
  replace(name: string, value: string): void {
    for (const key of this.#entries.keys()) if (key.toLowerCase() === name) this.#entries.delete(key);
    this.#entries.set(name, [value]);
  }

  get code(): number {
    return this.#code;
  }
  get description(): string {
    return this.#description;
  }
  get status(): string {
    return `${this.#code} ${this.#description}`.trim();
  }
  get hasError(): boolean {
    return this.#code >= 300;
  }

  [Symbol.iterator](): IterableIterator<[string, string[]]> {
    return this.#entries.entries();
  }
  size(): number {
    return this.#entries.size;
  }
  keys(): string[] {
    return [...this.#entries.keys()];
  }
  has(name: string): boolean {
    return this.#entries.has(name);
  }
  get(name: string): string {
    return this.#entries.get(name)?.[0] ?? '';
  }
  last(name: string): string {
    return this.#entries.get(name)?.at(-1) ?? '';
  }
  values(name: string): string[] {
    return [...(this.#entries.get(name) ?? [])];
  }
  set(name: string, value: string): void {
    this.#entries.set(checkName(name), [checkValue(value)]);
  }
  append(name: string, value: string): void {
    const values = this.#entries.get(checkName(name));
    if (values === undefined) this.#entries.set(name, [checkValue(value)]);
    else values.push(checkValue(value));
  }
  delete(name: string): void {
    this.#entries.delete(name);
  }
  toRecord(): Record<string, string[]> {
    return Object.fromEntries([...this.#entries].map(([name, values]) => [name, [...values]]));
  }

  /** The protocol's form, as the clients write theirs (a status line only with both code and description). */
  toString(): string {
    let text = 'NATS/1.0';
    if (this.#code > 0 && this.#description !== '') text += ` ${this.#code} ${this.#description}`;
    for (const [name, values] of this.#entries) for (const value of values) text += `\r\n${name}: ${value}`;
    return `${text}\r\n\r\n`;
  }
  encode(): Uint8Array {
    return encoder.encode(this.toString());
  }
}

/** A header name is a MIME token: no separator, space or control character (a bad one would corrupt the message). */
function checkName(name: string): string {
  if (typeof name !== 'string' || !/^[!#-'*+\-.0-9A-Z^-z|~]+$/.test(name)) {
    throw new TypeError(`invalid NATS header name: ${JSON.stringify(name)}`);
  }
  return name;
}

function checkValue(value: string): string {
  const text = String(value);
  if (/[\r\n]/.test(text)) throw new TypeError('NATS header values cannot contain \\r or \\n');
  return text.trim();
}
