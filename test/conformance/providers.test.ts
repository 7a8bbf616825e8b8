// The conformance suite run for the providers this repository holds: the built-in virtual cloud
// (its VM records in a real kube-apiserver), the example out-of-tree provider (loaded as a module,
// as --provider-module does), and any module a provider author names:
//   MCM_CONFORMANCE_MODULE=<module path or package> MCM_CONFORMANCE_TARGET=<target.json> npm run test:conformance
// where target.json holds {"provider", "providerSpec", "secret", "invalidProviderSpec",
// "secretValues"?, "ownVolume"?}.

import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { API_VERSION, type MachineClass } from '../../lib/api/types.js';
import { loadProviderModules } from '../../lib/driver/module.js';
import { ProviderRegistry, type ProviderContext } from '../../lib/driver/registry.js';
import { KubeClient } from '../../lib/kube/client.js';
import { RealClock } from '../../lib/kube/clock.js';
import type { PersistentVolumeSpec, Secret } from '../../lib/kube/types.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { newRegistry } from '../../lib/observability/metrics.js';
import { AWS_PROVIDER, awsProvider } from '../../lib/providers/aws/index.js';
import { VIRTUAL_PROVIDER, virtualProvider } from '../../lib/providers/virtual/index.js';
import { startControlPlane } from '../harness/controlplane.js';
import { provisionCloud, sampleMachineClass } from '../harness/ec2cloud.js';
import { startMoto } from '../harness/moto.js';
import { repoRoot } from '../harness/tools.js';
import { describeConformance, type ConformanceTarget } from './suite.js';

const NS = 'default';
const SECRET_VALUES = ['conformance-user-data-7f3a', 'conformance-key-91bc'];

const classOf = (name: string, provider: string, providerSpec: Record<string, unknown>): MachineClass => ({
  apiVersion: API_VERSION,
  kind: 'MachineClass',
  metadata: { name, namespace: NS },
  provider,
  providerSpec,
});

const secretOf = (data: Record<string, string>): Secret => ({
  apiVersion: 'v1',
  kind: 'Secret',
  metadata: { name: 'conformance', namespace: NS },
  data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
});

const plantedSecret = (): Secret =>
  secretOf({ userData: SECRET_VALUES[0] ?? '', accessKey: SECRET_VALUES[1] ?? '' });

function context(control: ProviderContext['control'] | undefined): ProviderContext {
  return {
    control: control as ProviderContext['control'],
    target: undefined,
    namespace: NS,
    nodes: undefined,
    clock: new RealClock(),
    logger: nullLogger,
    registry: newRegistry(),
  };
}

/** A registry with the given modules loaded, its providers instantiated without a target cluster. */
async function fromModules(
  modules: string[],
  control?: ProviderContext['control'],
): Promise<ProviderRegistry> {
  const registry = new ProviderRegistry();
  await loadProviderModules(modules, registry, nullLogger);
  registry.instantiate(context(control));
  registry.start();
  return registry;
}

describeConformance('virtual (built in, VM records in a real kube-apiserver)', async () => {
  const cp = await startControlPlane();
  const client = new KubeClient({
    kubeConfig: cp.kubeConfig,
    qps: 200,
    burst: 200,
    userAgent: 'conformance',
  });
  const registry = new ProviderRegistry().register(VIRTUAL_PROVIDER, virtualProvider());
  registry.instantiate(context(client));
  registry.start();
  const driver = registry.driverFor(VIRTUAL_PROVIDER);
  if (driver === undefined) throw new Error('virtual provider not instantiated');
  return {
    driver,
    machineClass: classOf('conformance', VIRTUAL_PROVIDER, {}),
    invalidClass: classOf('conformance-invalid', VIRTUAL_PROVIDER, { errorRate: 7 }),
    secret: plantedSecret(),
    secretValues: SECRET_VALUES,
    cleanup: async () => {
      await registry.stop();
      client.close();
      await cp.stop();
    },
  };
});

describeConformance('example (out-of-tree module, examples/provider-example)', async () => {
  const dir = await mkdtemp(path.join(tmpdir(), 'conformance-example-'));
  const registry = await fromModules([
    path.join(repoRoot, 'dist', 'examples', 'provider-example', 'src', 'index.js'),
  ]);
  const driver = registry.driverFor('example');
  if (driver === undefined) throw new Error('the example module registered no provider "example"');
  const ownVolume: { spec: PersistentVolumeSpec; id: string } = {
    spec: { csi: { driver: 'disk.example.mcm-ts.io', volumeHandle: 'disk-42' } },
    id: 'disk-42',
  };
  return {
    driver,
    machineClass: classOf('conformance', 'example', { directory: dir, machineType: 'ex.small' }),
    invalidClass: classOf('conformance-invalid', 'example', { directory: dir }),
    secret: plantedSecret(),
    secretValues: SECRET_VALUES,
    ownVolume,
    cleanup: async () => {
      await registry.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

describeConformance('AWS (built in, on the EC2 emulator)', async () => {
  const moto = await startMoto();
  const saved = process.env.AWS_ENDPOINT_URL_EC2;
  // The SDK's standard variable, read when the driver makes its first client.
  process.env.AWS_ENDPOINT_URL_EC2 = moto.endpoint;
  const cloud = await provisionCloud(moto.endpoint);
  const registry = new ProviderRegistry().register(AWS_PROVIDER, awsProvider());
  registry.instantiate(context(undefined));
  const driver = registry.driverFor(AWS_PROVIDER);
  if (driver === undefined) throw new Error('AWS provider not instantiated');
  const valid = sampleMachineClass(cloud, 'conformance');
  const invalid = sampleMachineClass(cloud, 'conformance-invalid');
  delete invalid.providerSpec.ami;
  return {
    driver,
    machineClass: valid,
    invalidClass: invalid,
    secret: secretOf({
      userData: SECRET_VALUES[0] ?? '',
      providerAccessKeyId: SECRET_VALUES[1] ?? '',
      providerSecretAccessKey: 'conformance-secret-access-key-5d2e',
    }),
    secretValues: [...SECRET_VALUES, 'conformance-secret-access-key-5d2e'],
    ownVolume: {
      spec: { csi: { driver: 'ebs.csi.aws.com', volumeHandle: 'vol-0c0ffee' } },
      id: 'vol-0c0ffee',
    },
    cleanup: async () => {
      await registry.stop();
      cloud.ec2.destroy();
      cloud.iam.destroy();
      await moto.stop();
      if (saved === undefined) delete process.env.AWS_ENDPOINT_URL_EC2;
      else process.env.AWS_ENDPOINT_URL_EC2 = saved;
    },
  };
});

/** What a provider author describes in MCM_CONFORMANCE_TARGET. */
interface TargetFile {
  provider: string;
  providerSpec: Record<string, unknown>;
  invalidProviderSpec: Record<string, unknown>;
  /** Secret data (plain text; the suite encodes it). */
  secret: Record<string, string>;
  secretValues?: string[];
  ownVolume?: { spec: PersistentVolumeSpec; id: string };
  settleMs?: number;
}

const moduleUnderTest = process.env.MCM_CONFORMANCE_MODULE ?? '';
if (moduleUnderTest !== '') {
  describeConformance(`module ${moduleUnderTest}`, async (): Promise<ConformanceTarget> => {
    const file = process.env.MCM_CONFORMANCE_TARGET ?? '';
    if (file === '') throw new Error('MCM_CONFORMANCE_TARGET must name the JSON file describing the target');
    const target = JSON.parse(readFileSync(file, 'utf8')) as TargetFile;
    const registry = await fromModules([moduleUnderTest]);
    const driver = registry.driverFor(target.provider);
    if (driver === undefined) throw new Error(`the module registered no provider "${target.provider}"`);
    const cls = classOf('conformance', target.provider, target.providerSpec);
    return {
      driver,
      machineClass: cls,
      invalidClass: classOf('conformance-invalid', target.provider, target.invalidProviderSpec),
      secret: secretOf(target.secret),
      secretValues: target.secretValues ?? Object.values(target.secret),
      ...(target.ownVolume === undefined ? {} : { ownVolume: target.ownVolume }),
      ...(target.settleMs === undefined ? {} : { settleMs: target.settleMs }),
      cleanup: () => registry.stop(),
    };
  });
}
