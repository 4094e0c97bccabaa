/**
 * Which account runs the embedded PostgreSQL. PostgreSQL refuses to run as root, so a demo started as root (a
 * container, a fresh server) hands the server to `postgres` if that account exists, else to `nobody`: both are
 * there already, so the demo adds no account to the machine.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

export interface Account {
  name: string;
  uid: number;
  gid: number;
}

const CANDIDATES = ['postgres', 'nobody'];

/** Undefined when this process is not root: the server then runs as this process's own user. */
export async function serverAccount(): Promise<Account | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  for (const name of CANDIDATES) {
    const account = await lookUp(name);
    if (account !== undefined) return account;
  }
  throw new Error(
    `running as root, and PostgreSQL refuses root: no ${CANDIDATES.join(' or ')} account to run it as (create one: useradd --system postgres)`,
  );
}

async function lookUp(name: string): Promise<Account | undefined> {
  try {
    const id = async (flag: string) => Number((await promisify(execFile)('id', [flag, name])).stdout.trim());
    const [uid, gid] = [await id('-u'), await id('-g')];
    return Number.isInteger(uid) && Number.isInteger(gid) && uid !== 0 ? { name, uid, gid } : undefined;
  } catch {
    return undefined;
  }
}
