// gardener's provider-side machine controllers as test components, run as the provider sidecar
// would beside our manager's MachineSet, MachineDeployment and safety controllers:
// - MCM v0.62.1's provider app (pkg/util/provider/app, unchanged) with the virtual cloud's Go
//   driver, built by `bash hack/tools.sh mcm-anchor` from test/bench/anchor;
// - gardener's real AWS provider (machine-controller-manager-provider-aws v0.28.0, unchanged),
//   built by `bash hack/tools.sh mcm-aws-anchor` from ../shared/third_party.

import { existsSync } from 'node:fs';
import path from 'node:path';

import type { ControlPlane } from './controlplane.js';
import { ManagedProcess, freePort } from './process.js';
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

export interface GardenerMachineControllerOptions {
  /** The binary (default: the provider app with the virtual cloud's Go driver). */
  command?: string;
  /** Its environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
}

/** Starts gardener's machine controller on the control plane's namespace (no leader election). */
export async function startGardenerMachineController(
  cp: ControlPlane,
  namespace: string,
  extraArgs: string[] = [],
  opts: GardenerMachineControllerOptions = {},
): Promise<ManagedProcess> {
  const port = await freePort();
  const proc = new ManagedProcess({
    name: 'gardener-machine-controller',
    command: opts.command ?? gardenerMachineControllerPath(),
    ...(opts.env === undefined ? {} : { env: opts.env }),
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
    logFile: path.join(cp.workDir, 'gardener-machine-controller.log'),
  });
  proc.start();
  return proc;
}
