/**
 * A TCP proxy to put between a service and what it connects to (a database, Redis, the next hop), whose link can
 * be made to misbehave while traffic flows: a slow drip (a congested or lossy link: every byte arrives, late), a
 * hold (a link that stalls: nothing arrives, nothing closes), or a cut (every open connection reset at once, as a
 * failover or a dropped NAT entry does). Faults apply to both directions, to the connections already open and to
 * the ones opened while the fault lasts; clearing one delivers whatever it held back, in order. Bytes are never
 * lost nor reordered by the proxy itself — only a cut loses what was in flight, as a real reset does.
 *
 * Why not a sidecar (toxiproxy, tc netem): the soak runs on loopback on a machine where neither can be installed
 * by the suite, and a fault must start and end at a known instant of the run, from the run itself.
 */
import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';

/** What the link does to the bytes crossing it. */
export type LinkFault =
  /** Nothing: bytes pass as they come. */
  | { readonly kind: 'none' }
  /** At most `bytes` bytes each `everyMs`, each way, per connection. */
  | { readonly kind: 'drip'; readonly bytes: number; readonly everyMs: number }
  /** Nothing passes, nothing closes: the bytes wait for the fault to clear. */
  | { readonly kind: 'hold' };

/** Where the proxy forwards to. */
export interface ProxyTarget {
  host: string;
  port: number;
}

/** Above this many bytes waiting in one direction, the sender is paused (TCP's own back-pressure, end to end). */
const HIGH_WATER = 1 << 20;

const NO_FAULT: LinkFault = { kind: 'none' };

/** One direction of a link: what `from` sent that `to` has not been given yet. */
class Direction {
  readonly from: Socket;
  readonly to: Socket;
  readonly #queue: Buffer[] = [];
  #queued = 0;
  /** `from` ended its side: `to` is ended once the queue has drained. */
  #ending = false;
  /** Paused by us: the queue is past its high water, or `to` asked us to wait. */
  #paused = false;
  #waitingForDrain = false;

  constructor(from: Socket, to: Socket) {
    this.from = from;
    this.to = to;
  }

  get queued(): number {
    return this.#queued;
  }

  /** Bytes from `from`: passed on at once when nothing is held back, else queued. */
  accept(chunk: Buffer, fault: LinkFault): void {
    if (fault.kind === 'none' && this.#queued === 0) {
      this.#write(chunk);
      return;
    }
    this.#queue.push(chunk);
    this.#queued += chunk.length;
    if (this.#queued > HIGH_WATER) this.#pause();
  }

  /** `from` will send nothing more. */
  end(): void {
    this.#ending = true;
    if (this.#queued === 0) this.to.end();
  }

  /** Gives `to` up to `limit` queued bytes (all of them with `Infinity`), in order. */
  release(limit: number): void {
    let left = limit;
    while (left > 0 && this.#queue.length > 0 && !this.to.destroyed) {
      const head = this.#queue[0] as Buffer;
      const part = head.length <= left ? head : head.subarray(0, left);
      if (part === head) this.#queue.shift();
      else this.#queue[0] = head.subarray(left);
      this.#queued -= part.length;
      left -= part.length;
      this.#write(part);
    }
    if (this.#queued <= HIGH_WATER / 2 && !this.#waitingForDrain) this.#resume();
    if (this.#ending && this.#queued === 0) this.to.end();
  }

  #write(chunk: Buffer): void {
    if (this.to.destroyed) return;
    if (!this.to.write(chunk) && !this.#waitingForDrain) {
      this.#waitingForDrain = true;
      this.#pause();
      this.to.once('drain', () => {
        this.#waitingForDrain = false;
        if (this.#queued <= HIGH_WATER / 2) this.#resume();
      });
    }
  }

  #pause(): void {
    if (this.#paused) return;
    this.#paused = true;
    this.from.pause();
  }

  #resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.from.resume();
  }
}

/** One proxied connection: the client's socket and ours to the target, a direction each way. */
class Link {
  readonly up: Direction;
  readonly down: Direction;
  readonly #sockets: [Socket, Socket];

  constructor(client: Socket, upstream: Socket, proxy: FaultProxy, done: (link: Link) => void) {
    this.up = new Direction(client, upstream);
    this.down = new Direction(upstream, client);
    this.#sockets = [client, upstream];
    for (const direction of [this.up, this.down]) {
      direction.from.on('data', (chunk: Buffer) => direction.accept(chunk, proxy.fault));
      // A side that finished sending: the other is told so once what it sent has been delivered (half-close, as
      // TCP carries it: the sockets allow half-open connections).
      direction.from.on('end', () => direction.end());
    }
    // An error on either side (a reset, a refused connection to the target) resets the other too, as across a
    // broken network path. A clean close waits for the other side to finish.
    const reset = () => {
      for (const socket of this.#sockets) socket.destroy();
    };
    let open = 2;
    for (const socket of this.#sockets) {
      socket.on('error', reset);
      socket.on('close', (hadError) => {
        if (hadError) reset();
        if (--open === 0) done(this);
      });
    }
  }

  release(limit: number): void {
    this.up.release(limit);
    this.down.release(limit);
  }

  reset(): void {
    for (const socket of this.#sockets) socket.resetAndDestroy();
  }
}

/**
 * A loopback TCP proxy in front of `target` with faults on demand (see the module's header).
 *
 * @example
 * ```ts
 * const proxy = await FaultProxy.start({ host: '127.0.0.1', port: 5432 });
 * const pool = new pg.Pool({ host: '127.0.0.1', port: proxy.port });
 * proxy.set({ kind: 'drip', bytes: 64, everyMs: 10 }); // a slow link, for a while
 * proxy.set({ kind: 'none' });
 * proxy.cut(); // every open connection reset
 * await proxy.close();
 * ```
 */
export class FaultProxy {
  readonly target: ProxyTarget;
  readonly #server: Server;
  readonly #links = new Set<Link>();
  #fault: LinkFault = NO_FAULT;
  #drip: NodeJS.Timeout | undefined;
  /** Connections accepted since the start (for a test of a run: did the service reconnect?). */
  accepted = 0;

  private constructor(target: ProxyTarget, server: Server) {
    this.target = target;
    this.#server = server;
  }

  /** Starts listening on an ephemeral loopback port. */
  static async start(target: ProxyTarget): Promise<FaultProxy> {
    const server = createServer({ allowHalfOpen: true, noDelay: true });
    const proxy = new FaultProxy(target, server);
    server.on('connection', (client) => proxy.#open(client));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return proxy;
  }

  /** The port services connect to instead of the target's. */
  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  /** The fault in force. */
  get fault(): LinkFault {
    return this.#fault;
  }

  /** Open connections. */
  get connections(): number {
    return this.#links.size;
  }

  /** Bytes held back, both ways, over every open connection. */
  get heldBytes(): number {
    let held = 0;
    for (const link of this.#links) held += link.up.queued + link.down.queued;
    return held;
  }

  /** Puts `fault` in force now, on open connections and new ones; `{ kind: 'none' }` delivers what was held. */
  set(fault: LinkFault): void {
    checkFault(fault);
    clearInterval(this.#drip);
    this.#drip = undefined;
    this.#fault = fault;
    if (fault.kind === 'none') {
      for (const link of this.#links) link.release(Number.POSITIVE_INFINITY);
    } else if (fault.kind === 'drip') {
      this.#drip = setInterval(() => {
        for (const link of this.#links) link.release(fault.bytes);
      }, fault.everyMs);
    }
  }

  /** Resets every open connection (RST to both ends); new ones are proxied as before. */
  cut(): void {
    for (const link of this.#links) link.reset();
  }

  /** Stops listening and resets every open connection. */
  async close(): Promise<void> {
    clearInterval(this.#drip);
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    this.cut();
    await closed;
  }

  #open(client: Socket): void {
    this.accepted++;
    client.setNoDelay(true);
    const upstream = connect({ host: this.target.host, port: this.target.port, noDelay: true, allowHalfOpen: true });
    this.#links.add(new Link(client, upstream, this, (link) => this.#links.delete(link)));
  }
}

function checkFault(fault: LinkFault): void {
  if (fault?.kind === 'none' || fault?.kind === 'hold') return;
  if (fault?.kind === 'drip') {
    const { bytes, everyMs } = fault;
    if (Number.isInteger(bytes) && bytes > 0 && Number.isInteger(everyMs) && everyMs > 0 && everyMs < 2 ** 31) return;
  }
  throw new TypeError(
    `a link fault is { kind: 'none' }, { kind: 'hold' } or { kind: 'drip', bytes, everyMs } with positive integers; got ${JSON.stringify(fault)}`,
  );
}
