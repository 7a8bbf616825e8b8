/**
 * A directory updated the way the kubelet updates a mounted Secret or projected volume: each
 * version of the files goes into a new hidden directory, the `..data` symlink is swapped to it
 * with one rename, and the names the pod sees are symlinks through `..data`. A reader never sees
 * a mix of two versions; a watch on a file's own inode would miss the swap.
 */
import { existsSync, mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export class SecretVolume {
  private version = 0;
  private current: string | undefined;

  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  /** The path a pod would read a key at. */
  path(key: string): string {
    return path.join(this.dir, key);
  }

  /** Publishes a new version of every key at once. */
  write(files: Record<string, string>): void {
    const name = `..${new Date().toISOString().replace(/[-:.]/g, '_')}.${++this.version}`;
    const dataDir = path.join(this.dir, name);
    mkdirSync(dataDir);
    for (const [key, content] of Object.entries(files)) {
      writeFileSync(path.join(dataDir, key), content, { mode: 0o440 });
    }
    const tmp = path.join(this.dir, '..data_tmp');
    symlinkSync(name, tmp);
    renameSync(tmp, path.join(this.dir, '..data'));
    for (const key of Object.keys(files)) {
      if (!existsSync(this.path(key))) symlinkSync(path.join('..data', key), this.path(key));
    }
    if (this.current !== undefined)
      rmSync(path.join(this.dir, this.current), { recursive: true, force: true });
    this.current = name;
  }
}
