// An out-of-tree provider loaded with --provider-module: the example package of this repository,
// loaded by a real manager process, runs a MachineDeployment 0→3→0 on its own cloud (VM records
// in a directory) against a real kube-apiserver; a broken class and a module written for another
// API version are refused with messages that say why.

import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';

import { ManagedProcess, freePort } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

const EXAMPLE_MODULE = path.join(repoRoot, 'dist', 'examples', 'provider-example', 'src', 'index.js');

describe('an out-of-tree provider module (--provider-module, real manager process)', function () {
  this.timeout(240_000);
  let env: LifecycleEnv;
  let cloudDir: string;
  let manager: ManagedProcess;
  let logFile: string;

  const vmFiles = async (): Promise<string[]> =>
    existsSync(cloudDir) ? (await readdir(cloudDir)).filter((f) => f.endsWith('.json')) : [];

  function managerProcess(name: string, module: string): ManagedProcess {
    logFile = path.join(env.cp.workDir, `${name}.log`);
    return new ManagedProcess({
      name,
      command: process.execPath,
      args: [
        path.join(repoRoot, 'dist', 'cmd', 'manager.js'),
        `--control-kubeconfig=${env.cp.kubeconfigPath}`,
        `--target-kubeconfig=${env.cp.kubeconfigPath}`,
        `--namespace=${NS}`,
        '--leader-elect=false',
        '--address=127.0.0.1',
        `--port=${String(portFor(name))}`,
        `--provider-module=${module}`,
        '--machine-safety-overshooting-period=5s',
        '--log-format=json',
      ],
      logFile,
    });
  }
  const ports = new Map<string, number>();
  const portFor = (name: string): number => ports.get(name) ?? 0;

  before(async function () {
    this.timeout(240_000);
    env = await LifecycleEnv.start();
    cloudDir = await mkdtemp(path.join(tmpdir(), 'example-cloud-'));
    ports.set('manager', await freePort());
    manager = managerProcess('manager', EXAMPLE_MODULE);
    manager.start();
    await env.createClass(
      'example',
      { directory: cloudDir, machineType: 'ex.small', cpu: '4', memory: '8Gi' },
      { provider: 'example' },
    );
  });

  after(async () => {
    await manager.stop(5000);
    await env.stop();
    await rm(cloudDir, { recursive: true, force: true });
  });

  it('runs a MachineDeployment 0→3→0 on the module’s cloud: one VM and one Node per machine, none left at 0', async () => {
    await env.createDeployment('ex', 0, 'example');
    await env.scale('ex', 3);
    await until(
      '3 Running machines of ex',
      async () => (await env.machines('ex')).filter((m) => phaseOf(m) === 'Running').length === 3,
      120_000,
    );
    const machines = await env.machines('ex');
    const nodes = await env.nodes();
    for (const m of machines) {
      const id = m.spec?.providerID ?? '';
      expect(id, `providerID of ${m.metadata.name ?? ''}`).to.match(
        /^example:\/\/\/zone-a\/ex-[0-9a-f]{16}$/,
      );
      expect(nodes.find((n) => n.spec?.providerID === id)?.metadata.name).to.equal(m.metadata.labels?.node);
    }
    expect((await vmFiles()).length, 'VM records in the cloud directory').to.equal(3);

    await env.scale('ex', 0);
    await until('no machine of ex', async () => (await env.machines('ex')).length === 0, 120_000);
    await until('no VM record left', async () => (await vmFiles()).length === 0, 30_000);
    await until(
      'no Node of the example cloud left',
      async () => !(await env.nodes()).some((n) => n.spec?.providerID?.startsWith('example://') === true),
      30_000,
    );
  });

  it('reports a class the module rejects on the machine, naming the field, and creates no VM', async () => {
    await env.createClass('example-bad', { directory: cloudDir }, { provider: 'example' });
    await env.createDeployment('exbad', 1, 'example-bad');
    await until(
      'the machine of exbad reports the missing field',
      async () =>
        (await env.machines('exbad')).some((m) =>
          (m.status?.lastOperation?.description ?? '').includes('providerSpec.machineType'),
        ),
      60_000,
    );
    expect(await vmFiles()).to.deep.equal([]);
  });

  it('refuses to start with a module written for another provider API version, and says so', async () => {
    const future = path.join(env.cp.workDir, 'future-provider.mjs');
    await writeFile(
      future,
      `export const providerApiVersion = 2;\nexport function registerProviders(api) { api.register('future', () => ({ driver: {} })); }\n`,
    );
    ports.set('future', await freePort());
    const proc = managerProcess('future', future);
    proc.start();
    const code = await Promise.race([
      proc.waitExit(),
      new Promise<string>((r) => {
        setTimeout(() => {
          r('still running');
        }, 60_000);
      }),
    ]);
    await proc.stop(2000);
    expect(code).to.equal(1);
    expect(readFileSync(logFile, 'utf8')).to.contain(
      'was written for provider API version 2; this manager serves version 1',
    );
  });
});
