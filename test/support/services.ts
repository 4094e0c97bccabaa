/**
 * Tests that need a real PostgreSQL, MariaDB, Redis, RabbitMQ or NATS ask for it here. Under `CI=true` an unreachable service
 * fails the test file (CI must never pass by skipping); elsewhere the tests are skipped with a message naming
 * the service and how to start it.
 */
import { Socket } from 'node:net';

export interface Service {
  name: string;
  url: string;
  /** How to start it on this machine. */
  start: string;
}

export const POSTGRES: Service = {
  name: 'PostgreSQL',
  url: process.env.DATABASE_URL ?? process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
  start: 'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start',
};

export const MARIADB: Service = {
  name: 'MariaDB',
  url: process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test',
  start: 'start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd',
};

export const REDIS: Service = {
  name: 'Redis',
  url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  start: 'redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no',
};

export const RABBITMQ: Service = {
  name: 'RabbitMQ',
  url: process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672',
  start: 'rabbitmq-server -detached',
};

export const NATS: Service = {
  name: 'NATS',
  url: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
  start:
    'start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server',
};

/** Whether the service's port accepts a connection (within 2 s). */
function reachable(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(2_000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
    socket.connect(Number(port), hostname);
  });
}

/**
 * Resolves true when `service` is reachable. Otherwise: under CI, throws (the file fails); elsewhere, warns
 * and resolves false, for `describe.runIf(...)`.
 */
export async function requireService(service: Service): Promise<boolean> {
  if (await reachable(service.url)) return true;
  const message = `${service.name} is not reachable at ${service.url}; start it with: ${service.start}`;
  if (process.env.CI) throw new Error(message);
  console.warn(`skipped: ${message}`);
  return false;
}
