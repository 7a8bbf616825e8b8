// kube-apiserver's CPU over a span of unknown length: Go's profiler serves fixed windows only, so
// windows of WINDOW_SECONDS are taken back to back from start() until stop() and written as
// numbered files. `go tool pprof -proto <files> > merged.pb.gz` joins them; `go tool pprof -top
// -diff_base=<theirs> <ours>` compares two sides.

import { writeFileSync } from 'node:fs';
import path from 'node:path';

import type { ControlPlane } from '../harness/controlplane.js';

const WINDOW_SECONDS = 5;

export interface ProfileSpan {
  /** Ends the span (the window under way runs to its end) and writes its windows; their paths. */
  stop(): Promise<string[]>;
}

/** Takes kube-apiserver CPU profiles back to back until stop(); files are `<dir>/<name>-<k>.pb.gz`. */
export function profileApiServer(
  cp: ControlPlane,
  dir: string,
  name: string,
  userAgent: string,
): ProfileSpan {
  const windows: Buffer[] = [];
  const state = { stopping: false };
  const loop = (async (): Promise<Error | undefined> => {
    while (!state.stopping) {
      try {
        windows.push(await cp.apiServerCpuProfile(WINDOW_SECONDS, userAgent));
      } catch (err) {
        return err instanceof Error ? err : new Error(String(err));
      }
    }
    return undefined;
  })();
  return {
    async stop() {
      state.stopping = true;
      const failure = await loop;
      if (failure !== undefined) throw failure;
      return windows.map((w, k) => {
        const file = path.join(dir, `${name}-${k}.pb.gz`);
        writeFileSync(file, w);
        return file;
      });
    },
  };
}
