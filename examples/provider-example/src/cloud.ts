// The example "cloud": each VM is a JSON file in a directory. What matters for a provider author is
// the shape, not the storage: ids derived from the machine so a retried create finds its VM,
// records written atomically, a delete of a missing VM that succeeds, a list by class.

import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rename, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';

export interface VmRecord {
  id: string;
  /** `<namespace>/<name>` of the machine it was created for. */
  machine: string;
  machineClass: string;
  machineType: string;
  zone: string;
  createdAt: string;
}

/** A VM id derived from the machine's identity: the same machine always gets the same id. */
export function vmIdFor(namespace: string, name: string, uid: string): string {
  return `ex-${createHash('sha256').update(`${namespace}/${name}/${uid}`).digest('hex').slice(0, 16)}`;
}

const RECORD = /^ex-[0-9a-f]{16}\.json$/;

export class FileCloud {
  constructor(readonly directory: string) {}

  private file(id: string): string {
    return path.join(this.directory, `${id}.json`);
  }

  /** Creates the VM unless it exists; returns the VM either way. */
  async create(vm: VmRecord): Promise<VmRecord> {
    const existing = await this.get(vm.id);
    if (existing !== undefined) return existing;
    await mkdir(this.directory, { recursive: true });
    const tmp = `${this.file(vm.id)}.${process.pid}.tmp`;
    await writeFile(tmp, JSON.stringify(vm), { mode: 0o600 });
    await rename(tmp, this.file(vm.id));
    return vm;
  }

  async get(id: string): Promise<VmRecord | undefined> {
    try {
      return JSON.parse(await readFile(this.file(id), 'utf8')) as VmRecord;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }

  /** Deletes the VM; true when it existed. */
  async delete(id: string): Promise<boolean> {
    try {
      await unlink(this.file(id));
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw err;
    }
  }

  async list(): Promise<VmRecord[]> {
    let names: string[];
    try {
      names = await readdir(this.directory);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const vms: VmRecord[] = [];
    for (const n of names.filter((x) => RECORD.test(x))) {
      const vm = await this.get(n.slice(0, -'.json'.length));
      if (vm !== undefined) vms.push(vm);
    }
    return vms;
  }
}
