/**
 * A real three-master Redis Cluster for the tests, started from the `redis-server` on this machine in a
 * temporary directory (ports chosen free, each with its cluster bus port + 10000; see redis-server.ts) and torn
 * down afterwards.
 */
import type { ChildProcess } from 'node:child_process';
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import { adminOf, canRunRedisServer, freePorts, killAll, spawnRedisServer } from './redis-server.ts';

const run = promisify(execFile);

export interface TestCluster {
  nodes: { host: string; port: number }[];
  /** A plain client on each node, for CLIENT LIST and the like. */
  admins: Redis[];
  stop(): Promise<void>;
}

/** Whether a `redis-server` and `redis-cli` can be run here. */
export const canStartCluster = canRunRedisServer;

/** Starts three masters, joins them into one cluster (16384 slots split evenly) and waits until it is `ok`. */
export async function startCluster(): Promise<TestCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-redis-cluster-'));
  const ports = await freePorts(3, true);
  const servers: ChildProcess[] = [];
  const admins: Redis[] = [];
  const stop = async () => {
    for (const admin of admins) admin.disconnect();
    await killAll(servers);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    for (const port of ports) {
      const conf = join(dir, `nodes-${port}.conf`);
      servers.push(spawnRedisServer(port, dir, ['--cluster-enabled', 'yes', '--cluster-config-file', conf]));
    }
    for (const port of ports) admins.push(await adminOf(port));
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
