// gardener's processes as test components:
// - MCM v0.62.1's provider app (pkg/util/provider/app, unchanged) with the virtual cloud's Go
//   driver, built by `bash hack/tools.sh mcm-anchor` from test/bench/anchor;
// - gardener's real AWS provider (machine-controller-manager-provider-aws v0.28.0, unchanged),
//   built by `bash hack/tools.sh mcm-aws-anchor` from ../shared/third_party;
// - MCM v0.62.1's own machine-controller-manager (the MachineDeployment, MachineSet and safety
//   controllers, unchanged) and its CRDs, from the same `mcm-anchor` build.
// The provider sidecars run as they would beside our manager's MachineSet, MachineDeployment and
// safety controllers; all of them together are gardener's whole stack.

import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';

import type { ControlPlane } from './controlplane.js';
import { ManagedProcess, freePort, waitUntil } from './process.js';
import { mcmAnchorDir, mcmAwsAnchorDir } from './tools.js';

/** The binary, or a failure naming the command that builds it. */
export function gardenerMachineControllerPath(): string {
  const bin = path.join(mcmAnchorDir(), 'bin', 'machine-controller');
  if (!existsSync(bin)) {
    throw new Error(
      `gardener's provider app is not built (expected ${bin}); run \`bash hack/tools.sh mcm-anchor\``,
    );
  }
  return bin;
}

/** gardener's AWS machine-controller, or a failure naming the command that builds it. */
export function gardenerAwsMachineControllerPath(): string {
  const bin = path.join(mcmAwsAnchorDir(), 'bin', 'machine-controller');
  if (!existsSync(bin)) {
    throw new Error(
      `gardener's AWS machine-controller is not built (expected ${bin}); run \`bash hack/tools.sh mcm-aws-anchor\`` +
        ' (it builds from ../shared/third_party/machine-controller-manager-provider-aws)',
    );
  }
  return bin;
}

/** gardener's machine-controller-manager binary, or a failure naming the command that builds it. */
export function gardenerMachineControllerManagerPath(): string {
  const bin = path.join(mcmAnchorDir(), 'bin', 'machine-controller-manager');
  if (!existsSync(bin)) {
    throw new Error(
      `gardener's machine-controller-manager is not built (expected ${bin}); run \`bash hack/tools.sh mcm-anchor\``,
    );
  }
  return bin;
}

/** The directory of gardener MCM's CRDs (one file per kind, as its release ships them). */
export function gardenerCrdDir(): string {
  const dir = path.join(mcmAnchorDir(), 'crds');
  if (!existsSync(dir)) {
    throw new Error(`gardener's CRDs are missing (expected ${dir}); run \`bash hack/tools.sh mcm-anchor\``);
  }
  return dir;
}

/**
 * `kubectl apply -f <dir>/` of CRD files, as an operator installs or replaces them (`serverSide`:
 * `--server-side`), then waits until each is established and the API group is discoverable.
 */
export async function applyCrdDirectory(
  cp: ControlPlane,
  dir: string,
  opts: { serverSide?: boolean } = {},
): Promise<void> {
  const r = await cp.kubectl(['apply', ...(opts.serverSide === true ? ['--server-side'] : []), '-f', dir]);
  if (r.code !== 0) throw new Error(`kubectl apply -f ${dir}: ${r.stderr}`);
  const names = readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .map((f) => `crd/${f.replace(/^machine\.sapcloud\.io_(.*)\.yaml$/, '$1.machine.sapcloud.io')}`);
  const w = await cp.kubectl(['wait', '--for=condition=Established', '--timeout=60s', ...names], {
    timeoutMs: 70_000,
  });
  if (w.code !== 0) throw new Error(`waiting for the CRDs of ${dir}: ${w.stderr}`);
  await waitUntil(
    'machine.sapcloud.io discovery',
    async () => (await cp.request('GET', '/apis/machine.sapcloud.io/v1alpha1')).status === 200,
    { timeoutMs: 30_000, intervalMs: 100 },
  );
}

export interface GardenerMachineControllerOptions {
  /** The binary (default: the provider app with the virtual cloud's Go driver). */
  command?: string;
  /** Its environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
}

/**
 * Starts gardener's machine controller on the control plane's namespace (no leader election unless
 * extraArgs turn it on: a later flag wins).
 */
export async function startGardenerMachineController(
  cp: ControlPlane,
  namespace: string,
  extraArgs: string[] = [],
  opts: GardenerMachineControllerOptions = {},
): Promise<ManagedProcess> {
  return startGardenerProcess(
    cp,
    'gardener-machine-controller',
    opts.command ?? gardenerMachineControllerPath(),
    namespace,
    extraArgs,
    opts.env,
  );
}

/**
 * Starts gardener's machine-controller-manager (MachineDeployment, MachineSet and safety
 * controllers) on the control plane's namespace and waits until it serves /healthz (no leader
 * election unless extraArgs turn it on).
 */
export async function startGardenerMachineControllerManager(
  cp: ControlPlane,
  namespace: string,
  extraArgs: string[] = [],
): Promise<ManagedProcess> {
  return startGardenerProcess(
    cp,
    'gardener-machine-controller-manager',
    gardenerMachineControllerManagerPath(),
    namespace,
    extraArgs,
    undefined,
  );
}

async function startGardenerProcess(
  cp: ControlPlane,
  name: string,
  command: string,
  namespace: string,
  extraArgs: string[],
  env: NodeJS.ProcessEnv | undefined,
): Promise<ManagedProcess> {
  const port = await freePort();
  const proc = new ManagedProcess({
    name,
    command,
    ...(env === undefined ? {} : { env }),
    args: [
      `--control-kubeconfig=${cp.kubeconfigPath}`,
      `--target-kubeconfig=${cp.kubeconfigPath}`,
      `--namespace=${namespace}`,
      '--leader-elect=false',
      '--address=127.0.0.1',
      `--port=${String(port)}`,
      '--v=2',
      ...extraArgs,
    ],
    logFile: path.join(cp.logDir, `${name}.log`),
  });
  proc.start();
  await waitUntil(
    `${name} /healthz`,
    async () => {
      try {
        return (await fetch(`http://127.0.0.1:${String(port)}/healthz`)).ok;
      } catch {
        return false;
      }
    },
    { timeoutMs: 60_000, process: proc },
  );
  return proc;
}
