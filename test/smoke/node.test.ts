// The smoke suite `.ci/run` runs on every supported Node.js release (the image's, and the other
// maintained lines; binaries from hack/tools.sh node), with this very Node running mocha: the
// manager command against a real kube-apiserver with an AWS class on the EC2 emulator, and dev
// mode, each started with process.execPath. Neither may print a runtime warning (Node's
// `(node:PID) …Warning`, such as the AWS SDK's NodeVersionSupportWarning on Node 20).

import { spawn } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { KubeConfig } from '@kubernetes/client-node';
import { expect } from 'chai';

import {
  API_VERSION,
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  type Machine,
} from '../../lib/api/types.js';
import { KubeClient } from '../../lib/kube/client.js';
import { CoreResources } from '../../lib/kube/resources.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { Ec2KubeletSimulator } from '../harness/ec2kubelet.js';
import {
  CLUSTER_TAG,
  REGION,
  provisionCloud,
  sampleMachineClass,
  sampleSecret,
} from '../harness/ec2cloud.js';
import { startMoto, type Moto } from '../harness/moto.js';
import { freePort } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { until } from '../integration/env/until.js';

/** Lines in which Node (or a library through process.emitWarning) reports a runtime warning. */
function warnings(output: string): string[] {
  return output.split('\n').filter((l) => /^\(node:\d+\) /.test(l) || l.includes('Warning: '));
}

function started(
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): { pid: number; output: () => string; exited: Promise<number | null> } {
  // Without the caller's NODE_OPTIONS and NODE_NO_WARNINGS: either could silence the very warnings
  // this suite looks for (--no-warnings, --no-deprecation), and the test would pass vacuously.
  const { NODE_OPTIONS: _options, NODE_NO_WARNINGS: _quiet, ...inherited } = process.env;
  const child = spawn(process.execPath, [path.join(repoRoot, 'dist', 'cmd', script), ...args], {
    env: { ...inherited, ...env },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
  return {
    pid: child.pid ?? 0,
    output: () => out,
    exited: new Promise((resolve) => child.on('exit', resolve)),
  };
}

function httpStatus(port: number, p: string): Promise<number> {
  return new Promise((resolve) => {
    http
      .get(`http://127.0.0.1:${port}${p}`, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      })
      .on('error', () => {
        resolve(0);
      });
  });
}

function runningOnEc2(list: Machine[]): Machine[] {
  return list.filter(
    (m) =>
      m.status?.currentStatus?.phase === 'Running' &&
      (m.spec?.providerID ?? '').startsWith(`aws:///${REGION}/i-`),
  );
}

describe(`on Node ${process.version}`, function () {
  this.timeout(180_000);

  it('the manager command runs an AWS MachineDeployment on the EC2 emulator against a real kube-apiserver, prints no runtime warning and exits 0 on SIGTERM', async () => {
    let cp: ControlPlane | undefined;
    let moto: Moto | undefined;
    let kubelet: Ec2KubeletSimulator | undefined;
    let client: KubeClient | undefined;
    let pid = 0;
    const exit = { done: false };
    try {
      // kwok turns the simulated kubelet's Nodes Ready, as in dev mode.
      cp = await startControlPlane({ installCRDs: true, kwok: true });
      moto = await startMoto();
      const cloud = await provisionCloud(moto.endpoint);
      cloud.ec2.destroy();
      cloud.iam.destroy();
      client = new KubeClient({ kubeConfig: cp.kubeConfig, userAgent: 'node-smoke' });
      kubelet = new Ec2KubeletSimulator({
        endpoint: moto.endpoint,
        region: REGION,
        clusterTag: CLUSTER_TAG,
        client,
        capacity: { cpu: '2', memory: '8Gi', pods: '110' },
      });
      kubelet.start();
      await client.create(CoreResources.secrets, sampleSecret());
      const cls = sampleMachineClass(cloud, 'smoke');
      await client.create(MachineClassResource, cls);
      const port = await freePort();
      const manager = started(
        'manager.js',
        [
          `--control-kubeconfig=${cp.kubeconfigPath}`,
          '--namespace=default',
          '--address=127.0.0.1',
          `--port=${port}`,
          '--leader-elect=false',
        ],
        { AWS_ENDPOINT_URL_EC2: moto.endpoint },
      );
      pid = manager.pid;
      void manager.exited.then(() => (exit.done = true));
      await until('ready', async () => exit.done || (await httpStatus(port, '/readyz')) === 200, 60_000);
      expect(exit.done, manager.output()).to.equal(false);
      await client.create(MachineDeploymentResource, {
        apiVersion: API_VERSION,
        kind: 'MachineDeployment',
        metadata: { name: 'smoke', namespace: 'default' },
        spec: {
          replicas: 2,
          selector: { matchLabels: { app: 'smoke' } },
          template: {
            metadata: { labels: { app: 'smoke' } },
            spec: { class: { kind: 'MachineClass', name: 'smoke' } },
          },
        },
      });
      const kube = client;
      await until(
        '2 machines Running on EC2 instances',
        async () =>
          runningOnEc2((await kube.list<Machine>(MachineResource, { namespace: 'default' })).items).length ===
          2,
        90_000,
      ).catch((err: unknown) => {
        throw new Error(`${String(err)}; the manager's output:\n${manager.output().slice(-4000)}`);
      });
      process.kill(pid, 'SIGTERM');
      expect(await manager.exited, manager.output()).to.equal(0);
      expect(warnings(manager.output())).to.deep.equal([]);
    } finally {
      if (pid !== 0 && !exit.done) process.kill(pid, 'SIGKILL');
      client?.close();
      await kubelet?.stop();
      await moto?.stop();
      await cp?.stop();
    }
  });

  it('dev mode with --provider=aws is Ready with its sample machines Running, prints no runtime warning and stops cleanly on Ctrl-C', async () => {
    const scratch = mkdtempSync(path.join(tmpdir(), 'mcm-smoke-'));
    const devDir = path.join(scratch, 'dev');
    const dev = started('dev.js', ['--no-autoscaler', '--provider=aws'], { MCM_DEV_DIR: devDir });
    const exit = { done: false };
    void dev.exited.then(() => (exit.done = true));
    let client: KubeClient | undefined;
    try {
      await until('Ready (or exited)', () => exit.done || dev.output().includes('Ready in'), 120_000);
      expect(exit.done, dev.output()).to.equal(false);
      const kc = new KubeConfig();
      kc.loadFromFile(path.join(devDir, 'kubeconfig'));
      const kube = new KubeClient({ kubeConfig: kc, userAgent: 'node-smoke' });
      client = kube;
      await until(
        'the 2 sample machines Running on EC2 instances',
        async () =>
          runningOnEc2((await kube.list<Machine>(MachineResource, { namespace: 'default' })).items).length ===
          2,
        90_000,
      );
      process.kill(-dev.pid, 'SIGINT');
      expect(await dev.exited, dev.output()).to.equal(0);
      expect(dev.output()).to.contain('Stopped; nothing is left running.');
      expect(warnings(dev.output())).to.deep.equal([]);
    } finally {
      client?.close();
      if (!exit.done) {
        try {
          process.kill(-dev.pid, 'SIGKILL');
        } catch {
          // gone
        }
      }
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});
