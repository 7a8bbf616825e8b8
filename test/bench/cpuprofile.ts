// A V8 CPU profile of a window of the benchmark process (the same profiler `node --cpu-prof`
// drives, started and stopped around the part worth looking at), and the summaries the benchmark
// prints from it: where the process's time went by component and by function.

import { writeFileSync } from 'node:fs';
import type { Profiler } from 'node:inspector';
import { Session } from 'node:inspector/promises';

export interface CpuProfiling {
  stop(file: string): Promise<Profiler.Profile>;
}

export async function startCpuProfile(): Promise<CpuProfiling> {
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return {
    async stop(file) {
      const { profile } = await session.post('Profiler.stop');
      session.disconnect();
      writeFileSync(file, JSON.stringify(profile));
      return profile;
    },
  };
}

/** Which part of the stack a frame belongs to. */
function componentOf(url: string, functionName: string): string {
  if (url === '') return functionName.startsWith('(') ? functionName : '(native)';
  if (url.includes('@grpc/grpc-js')) return 'grpc-js';
  if (url.includes('@grpc/proto-loader') || url.includes('protobufjs')) return 'protobufjs';
  if (url.includes('prom-client')) return 'prom-client';
  if (url.includes('/lib/autoscaler/')) return 'our server (lib/autoscaler)';
  if (url.startsWith('node:internal/http2')) return 'node http2';
  if (url.startsWith('node:')) return 'node (other)';
  if (url.includes('/lib/')) return 'our code (other)';
  return 'other';
}

interface Row {
  name: string;
  ms: number;
}

function rows(profile: Profiler.Profile, key: (n: Profiler.ProfileNode) => string): Row[] {
  const samples = profile.samples ?? [];
  const perSample = samples.length === 0 ? 0 : (profile.endTime - profile.startTime) / 1000 / samples.length;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const out = new Map<string, number>();
  for (const id of samples) {
    const n = byId.get(id);
    if (n === undefined) continue;
    const k = key(n);
    out.set(k, (out.get(k) ?? 0) + perSample);
  }
  return [...out.entries()].map(([name, ms]) => ({ name, ms })).sort((a, b) => b.ms - a.ms);
}

/** Self time by component (grpc-js, node http2, our server, …), largest first. */
export function byComponent(profile: Profiler.Profile): Row[] {
  return rows(profile, (n) => componentOf(n.callFrame.url, n.callFrame.functionName));
}

/** Self time by function, largest first. */
export function byFunction(profile: Profiler.Profile): Row[] {
  return rows(profile, (n) => {
    const f = n.callFrame;
    const file = f.url.replace(/^.*\/node_modules\//, '').replace(/^file:\/\/.*\/dist\//, '');
    return `${f.functionName === '' ? '(anonymous)' : f.functionName} ${file}${file === '' ? '' : `:${f.lineNumber + 1}`}`;
  });
}
