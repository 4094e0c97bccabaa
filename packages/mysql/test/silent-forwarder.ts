/**
 * A TCP forwarder to the test server that never passes the server's close on to the client: what a client sees
 * of a connection cut on the way (a failover that leaves it behind, a firewall that forgets it, a cable pulled),
 * where no FIN or RST ever arrives. While both ends are up, statements and answers pass through unchanged.
 *
 * A test can make only some connections silent (`silent`, asked when the server closes one): the others hear of
 * the close as they would without the forwarder, so a connection can be cut while its neighbours are not. And it
 * can move the forwarder's address to another server, as a failover moves a virtual address to a standby.
 */
import { EventEmitter, once } from 'node:events';
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';

/** Whether the server's close of the connection from the client's `clientPort` is withheld from the client. */
export type Silence = (clientPort: number) => boolean;

export class SilentForwarder {
  readonly #server: Server;
  readonly #silent: Silence;
  #upstream: { host: string; port: number };
  readonly #sockets = new Set<Socket>();
  /** Connections whose close was passed on and that the client has closed in turn: it has heard. */
  #heard = 0;
  readonly #events = new EventEmitter();

  private constructor(server: Server, silent: Silence, upstream: { host: string; port: number }) {
    this.#server = server;
    this.#silent = silent;
    this.#upstream = upstream;
  }

  /** Listens on a port of its own, forwarding every connection to `host`:`port`; by default, every one silent. */
  static async open(host: string, port: number, silent: Silence = () => true): Promise<SilentForwarder> {
    const server = createServer();
    const forwarder = new SilentForwarder(server, silent, { host, port });
    server.on('connection', (client) => forwarder.#forward(client));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return forwarder;
  }

  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  /** Forwards the connections made from now on to another server: an address moved to a standby in a failover. */
  moveTo(host: string, port: number): void {
    this.#upstream = { host, port };
  }

  /**
   * Resolves once `count` clients in all have been told of their server's close and have closed their end: a
   * client closes its end only after it has handled the close (Node's sockets end their side on the peer's FIN).
   */
  async heard(count: number): Promise<void> {
    while (this.#heard < count) await once(this.#events, 'heard');
  }

  /** Closes every connection, both ends, and stops listening. */
  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    this.#server.close();
    await once(this.#server, 'close');
  }

  #forward(client: Socket): void {
    const server = connect(this.#upstream.port, this.#upstream.host);
    const clientPort = client.remotePort as number;
    let clientLeft = false; // the client closed first: nothing of the server's to pass on
    client.once('end', () => {
      clientLeft = true;
    });
    for (const socket of [client, server]) {
      this.#sockets.add(socket);
      socket.on('error', () => {}); // a write to the server's closed end: swallowed, as the network would
      socket.on('close', () => this.#sockets.delete(socket));
    }
    client.pipe(server);
    // The server's end, or its close, is not passed on to a silent client: it goes on waiting for an answer.
    server.pipe(client, { end: false });
    server.once('close', () => {
      if (clientLeft || client.destroyed || this.#silent(clientPort)) return;
      client.once('close', () => {
        this.#heard++;
        this.#events.emit('heard');
      });
      // What the client still sends has nowhere to go: read and dropped, so that its close is read too.
      client.unpipe(server);
      client.resume();
      client.end();
    });
  }
}
