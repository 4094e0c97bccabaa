/**
 * A real three-master Redis Cluster for the tests, started from the `redis-server` on this machine in a
 * temporary directory (ports chosen free, each with its cluster bus port + 10000) and torn down afterwards.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';

const run = promisify(execFile);

export interface TestCluster {
  nodes: { host: string; port: number }[];
  /** A plain client on each node, for CLIENT LIST and the like. */
  admins: Redis[];
  stop(): Promise<void>;
}

/** Whether `port` can be listened on right now. */
function free(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** `count` ports, each free along with its cluster bus port (port + 10000). */
async function freePorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  for (let port = 20_000 + Math.floor(Math.random() * 9_000); ports.length < count && port < 30_000; port++) {
    if ((await free(port)) && (await free(port + 10_000))) ports.push(port);
  }
  if (ports.length < count) throw new Error('no free ports for a test cluster');
  return ports;
}

/** Whether a `redis-server` and `redis-cli` can be run here. */
export async function canStartCluster(): Promise<boolean> {
  try {
    await run('redis-server', ['--version']);
    await run('redis-cli', ['--version']);
    return true;
  } catch {
    return false;
  }
}

/** Starts three masters, joins them into one cluster (16384 slots split evenly) and waits until it is `ok`. */
export async function startCluster(): Promise<TestCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-redis-cluster-'));
  const ports = await freePorts(3);
  const servers: ChildProcess[] = [];
  const admins: Redis[] = [];
  const stop = async () => {
    for (const admin of admins) admin.disconnect();
    for (const server of servers) server.kill('SIGKILL');
    await Promise.all(servers.map((server) => (server.exitCode === null ? once(server, 'exit') : undefined)));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    for (const port of ports) {
      const server = spawn(
        'redis-server',
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          join(dir, `nodes-${port}.conf`),
          '--dir',
          dir,
          '--save',
          '',
          '--appendonly',
          'no',
        ],
        { stdio: 'ignore' },
      );
      servers.push(server);
    }
    for (const port of ports) {
      const admin = new Redis({ port, host: '127.0.0.1', retryStrategy: (n) => (n > 50 ? null : 20) });
      admins.push(admin);
      await admin.ping();
    }
    await run('redis-cli', [
      '--cluster',
      'create',
      ...ports.map((port) => `127.0.0.1:${port}`),
      '--cluster-replicas',
      '0',
      '--cluster-yes',
    ]);
    // Every node must agree the cluster is up before a client loads its slot map.
    for (const admin of admins) {
      const end = performance.now() + 20_000;
      while (!String(await admin.cluster('INFO')).includes('cluster_state:ok')) {
        if (performance.now() > end) throw new Error('test cluster never reached cluster_state:ok');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return { nodes: ports.map((port) => ({ host: '127.0.0.1', port })), admins, stop };
}
