/**
 * Local dev mode (`npm start`): a real control plane on this machine (etcd, kube-apiserver,
 * kube-scheduler, kube-controller-manager, kwok), the manager with the built-in virtual provider,
 * a sample MachineClass and MachineDeployment, and instructions. With `--provider=aws` the sample
 * class is gardener's AWS sample on the EC2 emulator (moto), with a kubelet simulator registering
 * a Node per running instance. Ctrl-C stops everything and removes the control plane's data; the
 * components' logs of the last run stay in .dev/logs.
 *
 * On a new machine only etcd and kube-apiserver (and moto) are built before this starts
 * (hack/start.sh); the other components are built while it runs and join when their builds end
 * (dev-builds.ts).
 */
import { copyFileSync, existsSync, mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';

import { API_VERSION, MachineClassResource, MachineDeploymentResource } from '../lib/api/types.js';
import type { MachineClass, MachineDeployment } from '../lib/api/types.js';
import { GroupAnnotation } from '../lib/autoscaler/groups.js';
import { defaultConfig } from '../lib/config.js';
import { KubeClient } from '../lib/kube/client.js';
import { isAlreadyExists } from '../lib/kube/errors.js';
import { CoreResources } from '../lib/kube/resources.js';
import { Manager } from '../lib/manager.js';
import { createLogger } from '../lib/observability/logger.js';
import { startControlPlane, type ControlPlane } from '../test/harness/controlplane.js';
import { lateBuilds, terminalLine, ToolBuild, type LateBuild } from './dev-builds.js';
import { startAutoscaler, type Autoscaler } from '../test/harness/autoscaler.js';
import {
  CLUSTER_TAG,
  REGION,
  ZONE,
  provisionCloud,
  sampleMachineClass,
  sampleSecret,
} from '../test/harness/ec2cloud.js';
import { Ec2KubeletSimulator } from '../test/harness/ec2kubelet.js';
import { startMoto, type Moto } from '../test/harness/moto.js';
import { detachChildProcesses, freePort } from '../test/harness/process.js';
import {
  autoscalerComponent,
  autoscalerDir,
  autoscalerUnavailableReason,
  binaryPath,
  isBuilt,
  newestAutoscalerVersion,
  newestUsableAutoscalerVersion,
  repoRoot,
} from '../test/harness/tools.js';

const NS = 'default';

/** kubeconfig and logs of the running (or last) dev mode: MCM_DEV_DIR, else .dev in the checkout. */
function devDirectory(): string {
  const dir = process.env.MCM_DEV_DIR;
  return dir === undefined || dir === '' ? path.join(repoRoot, '.dev') : path.resolve(dir);
}

interface DevOptions {
  /** Manager log verbosity. */
  verbosity: number;
  /** Start the real cluster-autoscaler against the manager's gRPC server. */
  autoscaler: boolean;
  /** The sample class's provider: the virtual cloud, or AWS on the EC2 emulator. */
  provider: 'virtual' | 'aws';
}

function parse(argv: readonly string[]): DevOptions | 'help' {
  const opts: DevOptions = { verbosity: 1, autoscaler: true, provider: 'virtual' };
  for (const arg of argv) {
    if (arg === '--help' || arg === '-h') return 'help';
    if (arg === '--no-autoscaler') {
      opts.autoscaler = false;
      continue;
    }
    const p = /^--provider=(.*)$/.exec(arg);
    if (p !== null) {
      if (p[1] !== 'virtual' && p[1] !== 'aws')
        throw new Error(`--provider must be virtual or aws, not ${p[1] ?? ''}`);
      opts.provider = p[1];
      continue;
    }
    const v = /^--v=(\d+)$/.exec(arg);
    if (v?.[1] !== undefined) opts.verbosity = Number(v[1]);
    else throw new Error(`unknown argument ${arg} (try --help)`);
  }
  return opts;
}

const HELP = `Usage: npm start [-- --v=N] [-- --no-autoscaler] [-- --provider=aws]

Starts a local control plane, the machine-controller-manager with the built-in virtual provider
and its cluster-autoscaler gRPC server, the real cluster-autoscaler against it, and a sample
autoscaled MachineDeployment, then waits. Ctrl-C stops everything and removes the control
plane's data; the components' logs of the last run stay in .dev/logs (MCM_DEV_DIR replaces .dev).

  --v=N            manager log verbosity (default 1; 4 debug)
  --no-autoscaler  do not start the cluster-autoscaler
  --provider=aws   the sample class is gardener's AWS sample class on the EC2 emulator (moto,
                   \`bash hack/tools.sh moto\`), with a kubelet simulator that registers a Node
                   per running instance (default: virtual)`;

function sampleClass(): MachineClass {
  return {
    apiVersion: API_VERSION,
    kind: 'MachineClass',
    metadata: { name: 'virtual-small', namespace: NS },
    provider: 'virtual',
    // Nodes register NotReady and turn Ready after a few seconds, like real ones.
    providerSpec: { bootDelay: '5s' },
    nodeTemplate: {
      capacity: { cpu: '2', memory: '4Gi', pods: '110' },
      instanceType: 'virtual-small',
      region: 'local',
      zone: 'local-a',
    },
  };
}

/** The node template the autoscaler needs to scale the AWS sample (t2.large) from zero. */
const AWS_NODE_TEMPLATE = {
  capacity: { cpu: '2', memory: '8Gi', pods: '110' },
  instanceType: 't2.large',
  region: REGION,
  zone: ZONE,
};

function sampleDeployment(className: string): MachineDeployment {
  const labels = { pool: 'workers' };
  return {
    apiVersion: API_VERSION,
    kind: 'MachineDeployment',
    metadata: {
      name: 'workers',
      namespace: NS,
      annotations: { [GroupAnnotation.MinSize]: '1', [GroupAnnotation.MaxSize]: '6' },
    },
    spec: {
      replicas: 2,
      selector: { matchLabels: labels },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      template: {
        metadata: { labels },
        spec: {
          class: { kind: 'MachineClass', name: className },
          nodeTemplate: { metadata: { labels: { 'node-role.kubernetes.io/worker': '' } } },
        },
      },
    },
  };
}

/** The EC2 emulator and what the AWS sample needs there (dev mode with --provider=aws). */
interface Ec2Dev {
  moto: Moto;
  kubelet: Ec2KubeletSimulator;
  cls: MachineClass;
}

async function startEc2(client: KubeClient, logDir: string): Promise<Ec2Dev> {
  const moto = await startMoto({ logDir });
  // The SDK's standard variable: the manager's AWS provider reaches the emulator through it.
  process.env.AWS_ENDPOINT_URL_EC2 = moto.endpoint;
  const cloud = await provisionCloud(moto.endpoint);
  cloud.ec2.destroy();
  cloud.iam.destroy();
  const kubelet = new Ec2KubeletSimulator({
    endpoint: moto.endpoint,
    region: REGION,
    clusterTag: CLUSTER_TAG,
    client,
    capacity: AWS_NODE_TEMPLATE.capacity,
  });
  kubelet.start();
  const cls = sampleMachineClass(cloud, 'aws-sample');
  cls.nodeTemplate = AWS_NODE_TEMPLATE;
  return { moto, kubelet, cls };
}

async function apply(client: KubeClient, ec2: Ec2Dev | undefined): Promise<void> {
  const cls = ec2?.cls ?? sampleClass();
  if (ec2 !== undefined) {
    try {
      await client.create(CoreResources.secrets, sampleSecret());
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
  }
  for (const [res, obj] of [
    [MachineClassResource, cls],
    [MachineDeploymentResource, sampleDeployment(cls.metadata.name ?? '')],
  ] as const) {
    try {
      await client.create(res, obj);
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
  }
}

function say(line = ''): void {
  process.stdout.write(`${line}\n`);
}

/**
 * The cluster-autoscaler dev mode runs, when wanted: the newest pinned release that can be built
 * here (on a clone without ../shared, where the newer releases' sources are, the module proxy's
 * release), with why it is not the newest pinned.
 */
function wantedAutoscaler(
  opts: DevOptions,
): { version: string; built: boolean; tool: string; olderBecause?: string } | undefined {
  if (!opts.autoscaler) return undefined;
  const version = newestUsableAutoscalerVersion();
  const newest = newestAutoscalerVersion();
  const olderBecause = version === newest ? undefined : autoscalerUnavailableReason(newest);
  return {
    version,
    built: existsSync(path.join(autoscalerDir(version), 'bin', 'cluster-autoscaler')),
    tool: autoscalerComponent(version),
    ...(olderBecause === undefined ? {} : { olderBecause }),
  };
}

function listed(names: string[]): string {
  if (names.length <= 1) return names.join('');
  return `${names.slice(0, -1).join(', ')} and ${names[names.length - 1] ?? ''}`;
}

async function main(): Promise<number> {
  const opts = parse(process.argv.slice(2));
  if (opts === 'help') {
    say(HELP);
    return 0;
  }
  const started = Date.now();
  // Ctrl-C reaches this process only; stop() below ends the components in order.
  detachChildProcesses();
  const kubeBuilt = isBuilt('kube-scheduler') && isBuilt('kube-controller-manager') && isBuilt('kubectl');
  const kwokBuilt = isBuilt('kwok');
  const wantedCA = wantedAutoscaler(opts);
  const pending: LateBuild[] = lateBuilds({ kube: kubeBuilt, kwok: kwokBuilt, autoscaler: wantedCA });
  const now = ['etcd', 'kube-apiserver'];
  if (kubeBuilt) now.push('kube-scheduler', 'kube-controller-manager');
  if (kwokBuilt) now.push('kwok');
  say(`Starting a local control plane (${now.join(', ')})...`);
  const devDir = devDirectory();
  const logDir = path.join(devDir, 'logs');
  rmSync(logDir, { recursive: true, force: true });
  mkdirSync(logDir, { recursive: true });
  const cp: ControlPlane = await startControlPlane({
    installCRDs: true,
    scheduler: kubeBuilt,
    controllerManager: kubeBuilt,
    kwok: kwokBuilt,
    logDir,
  });
  const kubeconfig = path.join(devDir, 'kubeconfig');
  copyFileSync(cp.kubeconfigPath, kubeconfig);
  const logger = createLogger({ verbosity: opts.verbosity, format: 'text' });
  // Plaintext on the loopback interface only: nothing but the local autoscaler can reach it.
  const grpcPort = await freePort();
  const manager = new Manager(
    {
      ...defaultConfig,
      controlKubeconfig: kubeconfig,
      namespace: NS,
      leaderElect: false,
      address: '127.0.0.1',
      port: 0,
      grpcAddress: `127.0.0.1:${grpcPort}`,
      grpcInsecure: true,
    },
    { logger, controlKubeConfig: cp.kubeConfig },
  );
  const client = new KubeClient({ kubeConfig: cp.kubeConfig, userAgent: 'dev-mode' });
  let autoscaler: Autoscaler | undefined;
  let ec2: Ec2Dev | undefined;
  let build: ToolBuild | undefined;
  let stopping = false;
  // Read through a call: the build loop below checks it again after each await.
  const isStopping = (): boolean => stopping;
  const stop = async (code: number): Promise<void> => {
    if (stopping) return;
    stopping = true;
    say('\nStopping... (Ctrl-C again to kill everything at once)');
    build?.kill();
    await autoscaler?.stop().catch(() => undefined);
    await manager.stop().catch(() => undefined);
    await ec2?.kubelet.stop().catch(() => undefined);
    await ec2?.moto.stop().catch(() => undefined);
    client.close();
    await cp.stop();
    say(`Stopped; nothing is left running. Logs of this run: ${logDir} (replaced by the next run)`);
    process.exit(code);
  };
  const onSignal = (): void => {
    // A second signal while stopping: the harness's exit hook kills the components and removes
    // the control plane's directory.
    if (stopping) process.exit(130);
    void stop(0);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // A crash must not leave a build running on its own.
  process.on('exit', () => build?.kill());
  const startAutoscalerNow = async (version: string): Promise<Autoscaler> =>
    startAutoscaler({
      version,
      controlPlane: cp,
      address: `127.0.0.1:${grpcPort}`,
      verbosity: 2,
      flags: { 'scale-down-unneeded-time': '30s', 'scale-down-delay-after-add': '30s' },
    });
  try {
    if (opts.provider === 'aws') {
      say('Starting the EC2 emulator (moto) and a kubelet simulator for its instances...');
      ec2 = await startEc2(client, logDir);
    }
    await manager.start();
    await apply(client, ec2);
    if (wantedCA?.olderBecause !== undefined) {
      say(
        `Using cluster-autoscaler ${wantedCA.version}, the newest that can be built here, ` +
          `not ${newestAutoscalerVersion()}: ${wantedCA.olderBecause}`,
      );
    }
    if (wantedCA !== undefined) {
      if (wantedCA.built) {
        say(`Starting cluster-autoscaler ${wantedCA.version}...`);
        autoscaler = await startAutoscalerNow(wantedCA.version);
      }
    }
  } catch (err) {
    say(`dev mode failed: ${err instanceof Error ? err.message : String(err)}`);
    await stop(1);
    return 1;
  }
  const kubectl = kubeBuilt ? binaryPath('kubectl') : undefined;
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  const caLine =
    autoscaler !== undefined
      ? `cluster-autoscaler ${autoscaler.version} scales "workers" (1..6 machines) through 127.0.0.1:${grpcPort}; its log: ${autoscaler.logFile}`
      : wantedCA !== undefined
        ? `cluster-autoscaler ${wantedCA.version} will scale "workers" (1..6 machines) once it is built.`
        : 'No cluster-autoscaler runs (--no-autoscaler or not buildable here).';
  const buildLine =
    pending.length === 0
      ? ''
      : `\nStill building (first run on this machine; cached afterwards): ${listed(pending.map((b) => b.what))}.
Each joins as soon as its build ends; this terminal says when. Build log: ${path.join(logDir, 'tools.log')}\n`;
  say(`
Ready in ${seconds}s. The manager runs with the ${ec2 === undefined ? 'virtual provider' : `AWS provider on the EC2 emulator at ${ec2.moto.endpoint} (AWS_ENDPOINT_URL_EC2; its state: ${ec2.moto.endpoint}/moto-api/)`}; metrics on http://127.0.0.1:${manager.port}/metrics
${caLine}
${buildLine}
  export KUBECONFIG=${kubeconfig}
  ${kubectl !== undefined ? `alias kubectl=${kubectl}` : '# kubectl: yours, or ours once it is built (this terminal says where)'}

Try:
  kubectl get mcd,mcs,mc,nodes                 # "workers" starts with 2 machines; idle ones go after ~30s (min 1)
  kubectl scale mcd workers --replicas=5       # more machines, more Nodes
  kubectl delete mc <name>                     # a machine is drained, deleted and replaced
  kubectl apply -f ${path.join(repoRoot, 'hack', 'dev', 'pending-pods.yaml')}   # pods that fit no node: the autoscaler adds machines
  kubectl delete deployment needs-room          # idle nodes: the autoscaler removes them after ~30s

Ctrl-C stops everything.`);
  void buildTheRest();
  return -1;

  /** Builds what is still missing, one component after the other, and adds each when built. */
  async function buildTheRest(): Promise<void> {
    const logFile = path.join(logDir, 'tools.log');
    for (const b of pending) {
      if (isStopping()) return;
      const began = Date.now();
      build = new ToolBuild(b.tool, logFile, (line) => {
        if (!isStopping() && terminalLine(line)) say(line);
      });
      const code = await build.run();
      build = undefined;
      if (isStopping()) return;
      if (code !== 0) {
        say(
          `[dev] ${b.what} could not be built (exit ${code}); dev mode goes on without it. Log: ${logFile}`,
        );
        continue;
      }
      try {
        await join(b);
        const took = Math.round((Date.now() - began) / 1000);
        say(`[dev] ${b.what} joined (built in ${took}s).${joinedHint(b)}`);
      } catch (err) {
        if (!isStopping())
          say(`[dev] ${b.what} could not start: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }

  async function join(b: LateBuild): Promise<void> {
    if (b.joins === 'kube') {
      await Promise.all([cp.addComponent('kube-controller-manager'), cp.addComponent('kube-scheduler')]);
    } else if (b.joins === 'kwok') {
      await cp.addComponent('kwok');
    } else if (wantedCA !== undefined) {
      autoscaler = await startAutoscalerNow(wantedCA.version);
    }
  }

  function joinedHint(b: LateBuild): string {
    if (b.joins === 'kube') return ` kubectl: alias kubectl=${binaryPath('kubectl')}`;
    if (b.joins === 'cluster-autoscaler' && autoscaler !== undefined)
      return ` It scales "workers" (1..6 machines); its log: ${autoscaler.logFile}`;
    return '';
  }
}

main().then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (err: unknown) => {
    process.stderr.write(`fatal: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
