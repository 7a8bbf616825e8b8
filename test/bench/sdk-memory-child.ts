// One measurement of the sdk-memory bench (sdk-memory.bench.ts), in a fresh process started with
// the manager's node flags: the manager's modules, then the EC2 SDK (the bundle, or the SDK's own
// packages), then the provider's calls through our client against the EC2 endpoint of
// AWS_ENDPOINT_URL_EC2. Prints one line of JSON (SdkMemorySample).
//
// node --expose-gc <NODE_FLAGS> dist/test/bench/sdk-memory-child.js <bundle|plain> <rounds> <instances>

import { readFileSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';

import type { Ec2Sdk } from '../../lib/providers/aws/client.js';
import { gc } from './table.js';

export type SdkVariant = 'bundle' | 'plain';

export interface SdkMemorySample {
  /** RSS with the manager's modules loaded, before the SDK (MiB, after a full GC). */
  baseMiB: number;
  /** The SDK's import. */
  loadMs: number;
  /** RSS with the SDK loaded, before a call (MiB, after a full GC). */
  loadedMiB: number;
  /** RSS after the calls (MiB, after a full GC). */
  callsMiB: number;
  /** V8 heap used after the calls (MiB). */
  heapMiB: number;
  /** The process's peak RSS (VmHWM, MiB): the figure `npm run bench aws` compares. */
  peakMiB: number;
}

const awsDist = path.join(
  path.dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  'lib',
  'providers',
  'aws',
);

/** The bundle client.ts loads, or the entry tsc compiled: the SDK's own packages (dist-cjs), as before. */
export function sdkModule(variant: SdkVariant): string {
  const file = variant === 'bundle' ? path.join('sdk-bundle', 'sdk-entry.js') : 'sdk-entry.js';
  return pathToFileURL(path.join(awsDist, file)).href;
}

const mib = (bytes: number): number => bytes / 2 ** 20;

function rssMiB(): number {
  gc();
  return mib(process.memoryUsage().rss);
}

function peakRssMiB(): number {
  const kb = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
  if (kb === undefined) throw new Error('no VmHWM in /proc/self/status');
  return Number(kb) / 1024;
}

async function main(): Promise<void> {
  const [variant, rounds, instances] = process.argv.slice(2);
  if (variant !== 'bundle' && variant !== 'plain') throw new Error(`variant: "${variant ?? ''}"`);
  const { tuneRuntime } = await import('../../lib/runtime.js');
  tuneRuntime();
  await import('../../lib/manager.js');
  const { sdkEc2ApiWith } = await import('../../lib/providers/aws/client.js');
  const baseMiB = rssMiB();

  const url = sdkModule(variant);
  const load = (): Promise<Ec2Sdk> => import(url) as Promise<Ec2Sdk>;
  const start = performance.now();
  await load();
  const loadMs = performance.now() - start;
  const loadedMiB = rssMiB();

  const api = sdkEc2ApiWith({ loadSdk: load })('eu-west-1', {
    kind: 'static',
    accessKeyId: 'AKID',
    secretAccessKey: 'S',
  });
  const ids = Array.from({ length: Number(instances) }, (_, i) => `i-${(0x1000 + i).toString(16)}`);
  // The driver's calls of a machine's life, five machines at a time.
  for (let r = 0; r < Number(rounds); r++) {
    await Promise.all(
      Array.from({ length: 5 }, async (_, m) => {
        const name = `machine-${r}-${m}`;
        await api.describeImages({ ImageIds: ['ami-0123456789abcdef0'] });
        await api.runInstances({
          ImageId: 'ami-0123456789abcdef0',
          InstanceType: 'm5.large',
          MinCount: 1,
          MaxCount: 1,
          ClientToken: name,
          TagSpecifications: [{ ResourceType: 'instance', Tags: [{ Key: 'Name', Value: name }] }],
        });
        await api.describeInstances({
          Filters: [{ Name: 'tag-key', Values: ['kubernetes.io/cluster/bench'] }],
          MaxResults: 1000,
        });
        await api.modifyInstanceAttribute({ InstanceId: ids[0] ?? '', SourceDestCheck: { Value: false } });
        await api.terminateInstances({ InstanceIds: [ids[0] ?? ''] });
      }),
    );
  }
  api.destroy();
  const callsMiB = rssMiB();
  const sample: SdkMemorySample = {
    baseMiB,
    loadMs,
    loadedMiB,
    callsMiB,
    heapMiB: mib(process.memoryUsage().heapUsed),
    peakMiB: peakRssMiB(),
  };
  console.log(JSON.stringify(sample));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
