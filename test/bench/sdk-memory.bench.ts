// `npm run bench sdk-memory`: what the EC2 SDK costs the manager's memory, the bundle client.ts
// loads (hack/bundle-aws-sdk.mjs) against the SDK's own packages (@aws-sdk/client-ec2's dist-cjs,
// what the manager loaded before the bundle). Each sample is a fresh process with the manager's
// node flags (lib/runtime.ts) that imports the manager's modules, loads the SDK, and sends the
// provider's calls through our client (DescribeImages, RunInstances, DescribeInstances of
// MCM_BENCH_SDK_MEMORY_INSTANCES instances, ModifyInstanceAttribute, TerminateInstances; five
// machines at a time, MCM_BENCH_SDK_MEMORY_ROUNDS times) to a local server that answers as EC2
// does. Reports the median of MCM_BENCH_SDK_MEMORY_RUNS samples per variant, taken alternately.

import { spawn } from 'node:child_process';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { NODE_FLAGS } from '../../lib/runtime.js';
import { repoRoot } from '../harness/tools.js';
import { sdkModule, type SdkMemorySample, type SdkVariant } from './sdk-memory-child.js';
import { printTable } from './table.js';

const RUNS = Number(process.env.MCM_BENCH_SDK_MEMORY_RUNS ?? '3');
const ROUNDS = Number(process.env.MCM_BENCH_SDK_MEMORY_ROUNDS ?? '20');
const INSTANCES = Number(process.env.MCM_BENCH_SDK_MEMORY_INSTANCES ?? '200');

const childScript = path.join(repoRoot, 'dist', 'test', 'bench', 'sdk-memory-child.js');

const XMLNS = 'http://ec2.amazonaws.com/doc/2016-11-15/';

/** An instance as EC2 describes it (the members gardener's sample class gives one). */
function instanceXml(id: string, name: string): string {
  const ip = `10.250.${(parseInt(id.slice(2), 16) >> 8) & 255}.${parseInt(id.slice(2), 16) & 255}`;
  const dns = `ip-${ip.replaceAll('.', '-')}.eu-west-1.compute.internal`;
  return `<item><instanceId>${id}</instanceId><imageId>ami-0123456789abcdef0</imageId>
<instanceState><code>16</code><name>running</name></instanceState><privateDnsName>${dns}</privateDnsName>
<dnsName/><reason/><keyName>shoot--project--cluster-ssh-publickey</keyName><amiLaunchIndex>0</amiLaunchIndex>
<productCodes/><instanceType>m5.large</instanceType><launchTime>2026-11-27T10:00:00.000Z</launchTime>
<placement><availabilityZone>eu-west-1a</availabilityZone><groupName/><tenancy>default</tenancy></placement>
<monitoring><state>disabled</state></monitoring><subnetId>subnet-0123456789abcdef0</subnetId>
<vpcId>vpc-0123456789abcdef0</vpcId><privateIpAddress>${ip}</privateIpAddress><sourceDestCheck>false</sourceDestCheck>
<groupSet><item><groupId>sg-0123456789abcdef0</groupId><groupName>shoot--project--cluster-nodes</groupName></item></groupSet>
<architecture>x86_64</architecture><rootDeviceType>ebs</rootDeviceType><rootDeviceName>/dev/sda1</rootDeviceName>
<blockDeviceMapping><item><deviceName>/dev/sda1</deviceName><ebs><volumeId>vol-${id.slice(2)}</volumeId>
<status>attached</status><attachTime>2026-11-27T10:00:01.000Z</attachTime><deleteOnTermination>true</deleteOnTermination></ebs></item></blockDeviceMapping>
<virtualizationType>hvm</virtualizationType><clientToken>${name}</clientToken>
<tagSet><item><key>Name</key><value>${name}</value></item><item><key>kubernetes.io/cluster/bench</key><value>1</value></item>
<item><key>kubernetes.io/role/node</key><value>1</value></item></tagSet><hypervisor>xen</hypervisor>
<networkInterfaceSet><item><networkInterfaceId>eni-${id.slice(2)}</networkInterfaceId><subnetId>subnet-0123456789abcdef0</subnetId>
<vpcId>vpc-0123456789abcdef0</vpcId><status>in-use</status><privateIpAddress>${ip}</privateIpAddress>
<privateDnsName>${dns}</privateDnsName><sourceDestCheck>false</sourceDestCheck>
<attachment><attachmentId>eni-attach-${id.slice(2)}</attachmentId><deviceIndex>0</deviceIndex><status>attached</status>
<attachTime>2026-11-27T10:00:00.000Z</attachTime><deleteOnTermination>true</deleteOnTermination></attachment>
<privateIpAddressesSet><item><privateIpAddress>${ip}</privateIpAddress><primary>true</primary></item></privateIpAddressesSet></item></networkInterfaceSet>
<iamInstanceProfile><arn>arn:aws:iam::123456789012:instance-profile/shoot--project--cluster-nodes</arn><id>AIPA0123456789</id></iamInstanceProfile>
<ebsOptimized>false</ebsOptimized><metadataOptions><state>applied</state><httpTokens>required</httpTokens>
<httpPutResponseHopLimit>2</httpPutResponseHopLimit><httpEndpoint>enabled</httpEndpoint></metadataOptions></item>`;
}

/** EC2's answer to one of the provider's calls (the Query protocol's XML). */
function ec2Answer(action: string, params: URLSearchParams, instances: number): string {
  const id = (i: number): string => `i-${(0x1000 + i).toString(16)}`;
  const members = ((): string => {
    switch (action) {
      case 'DescribeInstances': {
        const items = Array.from({ length: instances }, (_, i) => instanceXml(id(i), `machine-${i}`));
        return `<reservationSet><item><reservationId>r-0123456789</reservationId><ownerId>123456789012</ownerId>
<groupSet/><instancesSet>${items.join('')}</instancesSet></item></reservationSet>`;
      }
      case 'RunInstances':
        return `<reservationId>r-0123456789</reservationId><ownerId>123456789012</ownerId><groupSet/>
<instancesSet>${instanceXml(id(0), params.get('ClientToken') ?? 'machine')}</instancesSet>`;
      case 'DescribeImages':
        return `<imagesSet><item><imageId>ami-0123456789abcdef0</imageId><imageState>available</imageState>
<rootDeviceName>/dev/sda1</rootDeviceName><rootDeviceType>ebs</rootDeviceType><architecture>x86_64</architecture>
<blockDeviceMapping><item><deviceName>/dev/sda1</deviceName><ebs><snapshotId>snap-0123</snapshotId><volumeSize>50</volumeSize>
<deleteOnTermination>true</deleteOnTermination><volumeType>gp3</volumeType></ebs></item></blockDeviceMapping></item></imagesSet>`;
      case 'TerminateInstances':
        return `<instancesSet><item><instanceId>${params.get('InstanceId.1') ?? ''}</instanceId>
<currentState><code>32</code><name>shutting-down</name></currentState>
<previousState><code>16</code><name>running</name></previousState></item></instancesSet>`;
      default:
        return '<return>true</return>';
    }
  })();
  return `<?xml version="1.0" encoding="UTF-8"?>
<${action}Response xmlns="${XMLNS}"><requestId>7a62c49f-347e-4fc4-9331-6e8eEXAMPLE</requestId>${members}</${action}Response>`;
}

async function startEc2Server(instances: number): Promise<{ endpoint: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const params = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(200, { 'content-type': 'text/xml;charset=UTF-8' });
      res.end(ec2Answer(params.get('Action') ?? '', params, instances));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  };
}

function sample(variant: SdkVariant, endpoint: string): Promise<SdkMemorySample> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--expose-gc', ...NODE_FLAGS, childScript, variant, String(ROUNDS), String(INSTANCES)],
      {
        env: { ...process.env, AWS_ENDPOINT_URL_EC2: endpoint, NODE_NO_WARNINGS: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      const last = out.trim().split('\n').pop() ?? '';
      if (code !== 0 || !last.startsWith('{')) {
        reject(new Error(`sdk-memory child (${variant}) exited with ${code}: ${err}${out}`));
        return;
      }
      resolve(JSON.parse(last) as SdkMemorySample);
    });
  });
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] ?? 0) : ((s[mid - 1] ?? 0) + (s[mid] ?? 0)) / 2;
}

/** The bytes of a module and of the modules it imports statically (not its dynamic imports). */
function staticBytes(file: string, seen = new Set<string>()): number {
  if (seen.has(file)) return 0;
  seen.add(file);
  const text = readFileSync(file, 'utf8');
  let bytes = statSync(file).size;
  for (const m of text.matchAll(/^(?:import|export)\b[^;]*?\bfrom\s*"(\.[^"]+)"/gm)) {
    if (m[1] !== undefined) bytes += staticBytes(path.join(path.dirname(file), m[1]), seen);
  }
  return bytes;
}

function dirBytes(dir: string): number {
  let bytes = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    bytes += e.isDirectory() ? dirBytes(p) : statSync(p).size;
  }
  return bytes;
}

export async function benchSdkMemory(): Promise<void> {
  const server = await startEc2Server(INSTANCES);
  const samples: Record<SdkVariant, SdkMemorySample[]> = { plain: [], bundle: [] };
  try {
    for (let run = 0; run < RUNS; run++) {
      // Alternate which variant goes first, so that neither always runs on a colder machine.
      const order: SdkVariant[] = run % 2 === 0 ? ['plain', 'bundle'] : ['bundle', 'plain'];
      for (const variant of order) samples[variant].push(await sample(variant, server.endpoint));
    }
  } finally {
    await server.close();
  }

  const bundleFile = fileURLToPath(sdkModule('bundle'));
  const kB = (b: number): string => `${(b / 1000).toFixed(0)} kB`;
  const cjsIndex = path.join(repoRoot, 'node_modules', '@aws-sdk', 'client-ec2', 'dist-cjs', 'index.js');
  const code: Record<SdkVariant, string> = {
    plain: `${kB(statSync(cjsIndex).size)} client-ec2 index + deps`,
    bundle: `${kB(staticBytes(bundleFile))} (${kB(dirBytes(path.dirname(bundleFile)))} with lazy chunks)`,
  };
  const rows = (['plain', 'bundle'] as const).map((variant) => {
    const s = samples[variant];
    const m = (f: (x: SdkMemorySample) => number): number => median(s.map(f));
    return [
      variant === 'plain' ? '@aws-sdk packages' : 'bundle',
      code[variant],
      m((x) => x.loadMs),
      m((x) => x.baseMiB),
      m((x) => x.loadedMiB),
      m((x) => x.callsMiB),
      m((x) => x.heapMiB),
      m((x) => x.peakMiB),
      m((x) => x.loadedMiB - x.baseMiB),
      m((x) => x.callsMiB - x.baseMiB),
    ];
  });
  printTable(
    `EC2 SDK memory: fresh process (${[...NODE_FLAGS, '--expose-gc'].join(' ')}), manager modules imported, ` +
      `${ROUNDS}×5 machines' calls (DescribeInstances of ${INSTANCES}), median of ${RUNS}; RSS after a full GC, MiB`,
    [
      'SDK',
      'code loaded',
      'load ms',
      'RSS base',
      'RSS loaded',
      'RSS calls',
      'heap calls',
      'peak RSS',
      '+loaded',
      '+calls',
    ],
    rows,
  );
}
