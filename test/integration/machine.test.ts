import { expect } from 'chai';

import { Finalizer, MachinePhase } from '../../lib/api/constants.js';
import {
  API_VERSION,
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  type Machine,
  type MachineClass,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { CONTROLLER_NAMES } from '../../lib/config.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { ConfigMap, CoreEvent, Node, Secret } from '../../lib/kube/types.js';
import { LifecycleEnv, NS, nodeTemplate, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';
import { watchEvents } from './env/watch.js';

const isReady = (n: Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** Machines of a deployment and the Nodes that back them, checked against each other. */
async function fleet(env: LifecycleEnv, app: string): Promise<{ machines: Machine[]; nodes: Node[] }> {
  const machines = await env.machines(app);
  const names = new Set(machines.map((m) => m.metadata.name));
  const nodes = (await env.nodes()).filter((n) => names.has(n.metadata.name));
  return { machines, nodes };
}

/** Driver calls of one operation the manager made so far (from its call metrics). */
async function driverCalls(env: LifecycleEnv, operation: string): Promise<number> {
  const text =
    (await env.manager?.registry.getSingleMetricAsString('mcm_cloud_api_driver_request_duration_seconds')) ??
    '';
  const line = text.split('\n').find((l) => l.includes('_count{') && l.includes(`operation="${operation}"`));
  return Number(line?.split(' ').pop() ?? 0);
}

async function eventsFor(env: LifecycleEnv, name: string): Promise<CoreEvent[]> {
  const list = await env.client.list<CoreEvent>(CoreResources.events, {
    namespace: NS,
    fieldSelector: `involvedObject.name=${name}`,
  });
  return list.items;
}

/**
 * Records every phase a deployment's machines pass through, as the apiserver reports it. stop()
 * fails when the watch failed or ended early (a missed phase would go unnoticed otherwise).
 */
class PhaseRecorder {
  readonly transitions: { machine: string; phase: string; at: number; errorCode: string | undefined }[] = [];
  private readonly last = new Map<string, string>();
  private stopWatch: (() => Promise<void>) | undefined;

  constructor(
    private readonly env: LifecycleEnv,
    private readonly app: string,
  ) {}

  async start(): Promise<void> {
    this.stopWatch = await watchEvents<Machine>(
      this.env.client,
      NS,
      MachineResource,
      { labelSelector: `app=${this.app}` },
      (ev) => {
        if (ev.type !== 'ADDED' && ev.type !== 'MODIFIED') return;
        const name = ev.object.metadata.name ?? '';
        const phase = phaseOf(ev.object);
        if (this.last.get(name) === phase) return;
        this.last.set(name, phase);
        this.transitions.push({
          machine: name,
          phase,
          at: Date.now(),
          errorCode: ev.object.status?.lastOperation?.errorCode,
        });
      },
    );
  }

  phasesOf(machine: string): string[] {
    return this.transitions.filter((t) => t.machine === machine).map((t) => t.phase);
  }

  async stop(): Promise<void> {
    await this.stopWatch?.();
  }
}

describe('machine lifecycle on the virtual provider (real kube-apiserver)', function () {
  this.timeout(180_000);
  let env: LifecycleEnv;

  before(async () => {
    env = await LifecycleEnv.start();
    await env.startManager();
  });

  after(async () => {
    await env.stop();
  });

  it('a MachineDeployment of 3 becomes 3 Running machines with 3 Ready Nodes, and scaling to 6 then 2 leaves exactly the right Nodes', async () => {
    await env.createClass('small');
    await env.createDeployment('scale', 3, 'small');
    const check = async (n: number): Promise<boolean> => {
      const { machines, nodes } = await fleet(env, 'scale');
      if (machines.length !== n || !machines.every((m) => phaseOf(m) === MachinePhase.Running)) return false;
      if (nodes.length !== n || !nodes.every(isReady)) return false;
      for (const m of machines) {
        const node = nodes.find((x) => x.metadata.name === m.metadata.labels?.node);
        if (node?.spec?.providerID !== m.spec?.providerID) return false;
      }
      return true;
    };
    await until('3 Running machines with Ready nodes', () => check(3));
    const { machines: three, nodes: threeNodes } = await fleet(env, 'scale');
    for (const n of threeNodes) {
      expect(n.spec?.providerID).to.match(/^virtual:\/\/virtual-zone-a\//);
      expect(n.metadata.finalizers).to.include(Finalizer.MachineControllerNode);
      expect(n.metadata.labels?.['node.gardener.cloud/machine-name']).to.equal(n.metadata.name);
      expect(n.status?.allocatable?.pods).to.equal('110');
    }
    expect(three.every((m) => m.metadata.finalizers?.includes(Finalizer.MachineControllerManager))).to.be
      .true;

    await env.scale('scale', 6);
    await until('6 Running machines with Ready nodes', () => check(6));
    await env.scale('scale', 2);
    await until('2 Running machines with Ready nodes and no other node of the deployment', () => check(2));
    const all = await env.nodes();
    const vmNodes = all.filter((n) => n.metadata.name?.startsWith('scale-'));
    expect(vmNodes, 'no Node of a removed machine is left').to.have.length(2);
    const info = (await env.manager?.registry.getSingleMetricAsString('mcm_machine_info')) ?? '';
    const series = info.split('\n').filter((l) => l.includes('name="scale-'));
    expect(series, 'mcm_machine_info has a series per machine, none for deleted ones').to.have.length(2);
    const phase =
      (await env.manager?.registry.getSingleMetricAsString('mcm_machine_current_status_phase')) ?? '';
    expect(phase.split('\n').filter((l) => l.includes('name="scale-') && l.endsWith(' 1'))).to.have.length(2);
    // The first test of this manager: every driver call so far was for this deployment.
    expect(await driverCalls(env, 'create_machine'), 'CreateMachine calls').to.equal(6);
    expect(await driverCalls(env, 'delete_machine'), 'one DeleteMachine per removed machine').to.equal(4);
  });

  it('changing the class rolls every machine onto new VMs of the new class', async () => {
    await env.createClass('before', {}, { nodeTemplate: nodeTemplate({ instanceType: 'v-before' }) });
    await env.createClass('after', {}, { nodeTemplate: nodeTemplate({ instanceType: 'v-after' }) });
    await env.createDeployment('roll', 3, 'before');
    await until('3 Running on the first class', async () => {
      const { machines, nodes } = await fleet(env, 'roll');
      return machines.length === 3 && machines.every((m) => phaseOf(m) === 'Running') && nodes.length === 3;
    });
    const oldNames = new Set((await env.machines('roll')).map((m) => m.metadata.name));
    await env.client.patch(
      MachineDeploymentResource,
      'roll',
      { spec: { template: { spec: { class: { kind: 'MachineClass', name: 'after' } } } } },
      { type: 'merge', namespace: NS },
    );
    await until(
      'every machine replaced by one of the new class',
      async () => {
        const { machines, nodes } = await fleet(env, 'roll');
        return (
          machines.length === 3 &&
          machines.every((m) => !oldNames.has(m.metadata.name) && phaseOf(m) === 'Running') &&
          nodes.length === 3 &&
          nodes.every((n) => n.metadata.labels?.['node.kubernetes.io/instance-type'] === 'v-after')
        );
      },
      120_000,
    );
    const left = (await env.nodes()).filter((n) => oldNames.has(n.metadata.name));
    expect(left, 'the old VMs (nodes) are gone').to.have.length(0);
  });

  it('deleting the deployment leaves no machine, no Node and no VM', async () => {
    await env.createClass('gone');
    await env.createDeployment('gone', 2, 'gone');
    await until('2 Running', async () => {
      const { machines, nodes } = await fleet(env, 'gone');
      return machines.length === 2 && machines.every((m) => phaseOf(m) === 'Running') && nodes.length === 2;
    });
    const names = new Set((await env.machines('gone')).map((m) => m.metadata.name));
    await env.client.delete(MachineDeploymentResource, 'gone', { namespace: NS });
    await until('machines and nodes gone', async () => {
      const machines = await env.machines('gone');
      const nodes = (await env.nodes()).filter((n) => names.has(n.metadata.name));
      return machines.length === 0 && nodes.length === 0;
    });
    await until('the deployment is gone', async () => {
      try {
        await env.client.get(MachineDeploymentResource, 'gone', NS);
        return false;
      } catch {
        return true;
      }
    });
  });

  it('a boot that never completes goes CrashLoopBackOff, then Failed at the creation timeout, and the MachineSet replaces it', async () => {
    await env.createClass('hang', { failure: { bootNeverCompletes: true } });
    const rec = new PhaseRecorder(env, 'hang');
    await rec.start();
    await env.createDeployment('hang', 1, 'hang', {}, { creationTimeout: '6s' });
    const first = await until('a machine', async () => (await env.machines('hang'))[0]);
    const name = first.metadata.name ?? '';
    await until(
      'the first machine Failed',
      () => rec.phasesOf(name).includes(MachinePhase.Failed) || undefined,
      60_000,
    );
    const phases = rec.phasesOf(name);
    expect(phases).to.include(MachinePhase.CrashLoopBackOff);
    expect(phases.indexOf(MachinePhase.CrashLoopBackOff)).to.be.lessThan(phases.indexOf(MachinePhase.Failed));
    const failedAt = rec.transitions.find((t) => t.machine === name && t.phase === 'Failed')?.at ?? 0;
    const created = Date.parse(first.metadata.creationTimestamp ?? '');
    expect(failedAt - created, 'Failed after the 6 s creation timeout').to.be.greaterThan(5_000);
    const crash = rec.transitions.find(
      (t) => t.machine === name && t.phase === MachinePhase.CrashLoopBackOff,
    );
    expect(crash?.errorCode, 'initialisation failed with Uninitialized').to.equal('Uninitialized');
    await until('a replacement machine exists and the failed one is gone', async () => {
      const machines = await env.machines('hang');
      return machines.length >= 1 && !machines.some((m) => m.metadata.name === name) ? true : undefined;
    });
    await rec.stop();
    await env.scale('hang', 0);
  });

  it('a node turning NotReady makes its machine Unknown, then Failed after the health timeout, replacing at most the budget (1) at a time', async () => {
    await env.createClass('flaky', { failure: { notReadyAfter: '2s' } });
    const rec = new PhaseRecorder(env, 'flaky');
    await rec.start();
    await env.createDeployment(
      'flaky',
      3,
      'flaky',
      { strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 1 } } },
      { healthTimeout: '3s' },
    );
    // Every machine of this class fails 2 s after it runs, so replacements go on forever; watch
    // long enough for several, then check that no Failed mark was made while another
    // replacement had not yet produced a Running machine.
    await until(
      'four machines marked Failed by the health check',
      () => rec.transitions.filter((t) => t.phase === MachinePhase.Failed).length >= 4 || undefined,
      90_000,
    );
    await env.scale('flaky', 0);
    await rec.stop();
    const unknownFirst = rec.transitions
      .filter((t) => t.phase === MachinePhase.Failed)
      .every((f) => {
        const ph = rec.phasesOf(f.machine);
        return (
          ph.includes(MachinePhase.Unknown) &&
          ph.indexOf(MachinePhase.Unknown) < ph.lastIndexOf(MachinePhase.Failed)
        );
      });
    expect(unknownFirst, 'every Failed machine went through Unknown first').to.be.true;
    // Replay: a Failed mark opens a replacement; a new machine reaching Running closes one.
    let open = 0;
    let maxOpen = 0;
    const joined = new Set<string>();
    for (const t of rec.transitions) {
      if (t.phase === MachinePhase.Failed) {
        open++;
        maxOpen = Math.max(maxOpen, open);
      } else if (t.phase === MachinePhase.Running && !joined.has(t.machine)) {
        joined.add(t.machine);
        if (open > 0) open--;
      }
    }
    expect(maxOpen, 'replacements in flight at once').to.equal(1);
  });

  it('capacity exhaustion reports ResourceExhausted and waits for the resource-exhausted retry; raising the capacity creates the rest', async () => {
    await env.createClass(
      'tight',
      { zoneCapacity: { 'eu-tight-a': 2 } },
      { nodeTemplate: nodeTemplate({ zone: 'eu-tight-a' }) },
    );
    await env.createDeployment('tight', 4, 'tight');
    await until('2 Running and 2 out of capacity', async () => {
      const machines = await env.machines('tight');
      const running = machines.filter((m) => phaseOf(m) === 'Running').length;
      const exhausted = machines.filter((m) => m.status?.lastOperation?.errorCode === 'ResourceExhausted');
      return machines.length === 4 && running === 2 && exhausted.length === 2 ? true : undefined;
    });
    const failures = async (): Promise<number> => {
      const text = await env.manager?.registry.getSingleMetricAsString(
        'mcm_cloud_api_driver_requests_failed_total',
      );
      const line = text
        ?.split('\n')
        .find((l) => l.includes('operation="create_machine"') && l.includes('ResourceExhausted'));
      return Number(line?.split(' ').pop() ?? 0);
    };
    const before = await failures();
    // A window in which something must NOT happen: no create is retried before the
    // --resource-exhausted-retry period, which is longer than this window.
    await new Promise((r) => setTimeout(r, 4000));
    expect(await failures(), 'no create retried before --resource-exhausted-retry').to.equal(before);
    for (const m of (await env.machines('tight')).filter(
      (x) => x.status?.lastOperation?.errorCode === 'ResourceExhausted',
    )) {
      expect(phaseOf(m)).to.equal(MachinePhase.CrashLoopBackOff);
      expect(m.status?.lastOperation?.state).to.equal('Failed');
      expect(m.status?.lastOperation?.description).to.contain('ResourceExhausted');
    }
    await env.client.patch(
      MachineClassResource,
      'tight',
      { providerSpec: { zoneCapacity: { 'eu-tight-a': 4 } } },
      { type: 'merge', namespace: NS },
    );
    await until('4 Running after the capacity was raised', async () => {
      const machines = await env.machines('tight');
      return machines.length === 4 && machines.every((m) => phaseOf(m) === 'Running');
    });
  });

  it('a missing class, a missing secret or a bad providerSpec is reported in status and an event, and nothing is created until it is fixed', async () => {
    await env.createClass('needs-secret', {}, { secretRef: { name: 'absent-secret', namespace: NS } });
    await env.createClass('bad-spec', { bootDelay: 'soon', errorRate: 3, colour: 'blue' });
    const machine = (name: string, cls: string): Machine => ({
      apiVersion: API_VERSION,
      kind: 'Machine',
      metadata: { name, namespace: NS },
      spec: { class: { kind: 'MachineClass', name: cls } },
    });
    for (const [name, cls] of [
      ['no-class', 'absent-class'],
      ['no-secret', 'needs-secret'],
      ['bad-spec', 'bad-spec'],
    ] as const) {
      await env.client.create(MachineResource, machine(name, cls));
    }
    const expectations: [string, RegExp, string][] = [
      ['no-class', /MachineClass default\/absent-class not found/, 'MachineClassNotFound'],
      ['no-secret', /Secret default\/absent-secret .* not found/, 'SecretNotFound'],
      [
        'bad-spec',
        /invalid providerSpec of MachineClass bad-spec: .*providerSpec\.colour: unknown option/,
        'CreateFailed',
      ],
    ];
    for (const [name, message, reason] of expectations) {
      const m = await until(`${name} reported`, async () => {
        const got = await env.client.get<Machine>(MachineResource, name, NS);
        return message.test(got.status?.lastOperation?.description ?? '') ? got : undefined;
      });
      expect(m.status?.lastOperation?.state).to.equal('Failed');
      expect(m.status?.lastOperation?.type).to.equal('Create');
      const events = await until(`${name} event`, async () => {
        const evs = await eventsFor(env, name);
        return evs.some((e) => e.reason === reason) ? evs : undefined;
      });
      expect(events.find((e) => e.reason === reason)?.type).to.equal('Warning');
    }
    const badSpec = await env.client.get<Machine>(MachineResource, 'bad-spec', NS);
    expect(badSpec.status?.lastOperation?.errorCode).to.equal('InvalidArgument');
    expect(badSpec.status?.lastOperation?.description).to.contain(
      'providerSpec.bootDelay: must be a duration',
    );
    expect(badSpec.status?.lastOperation?.description).to.contain(
      'providerSpec.errorRate: must be a number from 0 to 1',
    );
    const nodes = (await env.nodes()).map((n) => n.metadata.name);
    expect(nodes).to.not.include.members(['no-class', 'no-secret', 'bad-spec']);
    // Missing pieces appear: the waiting machines go ahead without waiting for a periodic retry.
    await env.createClass('absent-class');
    await env.client.create<Secret>(CoreResources.secrets, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'absent-secret', namespace: NS },
      data: { userData: Buffer.from('#!/bin/sh\necho <<MACHINE_NAME>>').toString('base64') },
    });
    await until(
      'both fixed machines Running',
      async () => {
        const a = await env.client.get<Machine>(MachineResource, 'no-class', NS);
        const b = await env.client.get<Machine>(MachineResource, 'no-secret', NS);
        return phaseOf(a) === 'Running' && phaseOf(b) === 'Running';
      },
      30_000,
    );
    const secret = await env.client.get<Secret>(CoreResources.secrets, 'absent-secret', NS);
    expect(secret.metadata.finalizers, 'a referenced secret is protected').to.include(
      Finalizer.MachineControllerSecret,
    );
    const cls = await env.client.get<MachineClass>(MachineClassResource, 'absent-class', NS);
    expect(cls.metadata.finalizers, 'a referenced class is protected').to.include(
      Finalizer.MachineControllerManager,
    );
    for (const name of ['no-class', 'no-secret', 'bad-spec'])
      await env.client.delete(MachineResource, name, { namespace: NS });
    await until('the standalone machines are gone', async () => {
      const left = (await env.machines()).filter((m) =>
        ['no-class', 'no-secret', 'bad-spec'].includes(m.metadata.name ?? ''),
      );
      return left.length === 0;
    });
    await until('the class loses its finalizer once unreferenced', async () => {
      const c = await env.client.get<MachineClass>(MachineClassResource, 'absent-class', NS);
      return !(c.metadata.finalizers ?? []).includes(Finalizer.MachineControllerManager);
    });
  });

  it('deleting a Node deletes its machine, and the MachineSet replaces it', async () => {
    await env.createClass('nodedel');
    await env.createDeployment('nodedel', 1, 'nodedel');
    const m = await until('Running', async () =>
      (await env.machines('nodedel')).find((x) => phaseOf(x) === 'Running'),
    );
    await env.client.delete(CoreResources.nodes, m.metadata.name ?? '');
    await until('the machine is replaced by a new Running one', async () => {
      const machines = await env.machines('nodedel');
      return (
        machines.length === 1 &&
        machines[0]?.metadata.name !== m.metadata.name &&
        phaseOf(machines[0] as Machine) === 'Running'
      );
    });
    await until(
      'the old node is gone',
      async () => !(await env.nodes()).some((n) => n.metadata.name === m.metadata.name),
    );
  });
});

describe('a Pending machine whose VM vanishes before its node joins (real kube-apiserver)', function () {
  this.timeout(120_000);
  let env: LifecycleEnv;

  before(async () => {
    env = await LifecycleEnv.start();
    // On a real cloud a VM that vanishes before its kubelet registers leaves no Node whose deletion
    // would take the machine along. Here a VM is its Node: without the node controller, deleting
    // the Node is a VM vanishing that nothing but the driver can report. A short launch back-off
    // (the default is 30 s) keeps the test short.
    await env.startManager({
      controllers: CONTROLLER_NAMES.filter((c) => c !== 'node'),
      launchFailureBackoffMs: 5_000,
    });
  });

  after(async () => {
    await env.stop();
  });

  it('is marked Failed (NotFound) as a failed launch within 45 s, not at the 20-minute creation timeout; its replacement waits for the class’s launch back-off, then launches', async () => {
    await env.createClass('vanish', { bootDelay: '1h' });
    const rec = new PhaseRecorder(env, 'vanish');
    await rec.start();
    await env.createDeployment('vanish', 1, 'vanish');
    const m = await until('a Pending machine', async () =>
      (await env.machines('vanish')).find((x) => phaseOf(x) === MachinePhase.Pending),
    );
    const name = m.metadata.name ?? '';
    expect(m.spec?.creationTimeout, 'the default creation timeout (20m) applies').to.equal(undefined);
    const vanished = Date.now();
    await env.client.delete(CoreResources.nodes, name);
    await until(
      'a new Pending machine replaces it',
      async () => {
        const machines = await env.machines('vanish');
        return (
          machines.length === 1 &&
          machines[0]?.metadata.name !== name &&
          phaseOf(machines[0] as Machine) === MachinePhase.Pending
        );
      },
      50_000,
    );
    const replacedAfter = Date.now() - vanished;
    const failed = rec.transitions.find((t) => t.machine === name && t.phase === MachinePhase.Failed);
    expect(failed?.errorCode, 'marked Failed with NotFound').to.equal('NotFound');
    expect((failed?.at ?? Infinity) - vanished, 'failed long before the creation timeout').to.be.lessThan(
      45_000,
    );
    // Its replacement was held by the launch back-off first (a creation error for the autoscaler),
    // and launched once the hold ended.
    const replacement = rec.transitions.find(
      (t) => t.machine !== name && t.phase === MachinePhase.CrashLoopBackOff,
    );
    expect(replacement?.errorCode, 'the replacement held, FailedPrecondition').to.equal('FailedPrecondition');
    expect(replacedAfter, 'replaced long before the creation timeout').to.be.lessThan(50_000);
    const events = await eventsFor(env, name);
    const event = events.find((e) => e.reason === 'LaunchFailed');
    expect(event?.type).to.equal('Warning');
    expect(event?.message).to.contain('no longer exists').and.to.contain('back off');
    await until(
      'the old node is gone',
      async () => !(await env.nodes()).some((n) => n.metadata.name === name),
    );
    await rec.stop();
    await env.scale('vanish', 0);
  });
});

describe('machine lifecycle without a target cluster (real kube-apiserver)', function () {
  this.timeout(120_000);
  let env: LifecycleEnv;

  before(async () => {
    env = await LifecycleEnv.start();
    await env.startManager({ targetKubeconfig: 'none', controlKubeconfig: env.cp.kubeconfigPath });
  });

  after(async () => {
    await env.stop();
  });

  it('--target-kubeconfig=none brings machines to Available with addresses, and deletes their VMs', async () => {
    await env.createClass('plain');
    await env.createDeployment('notarget', 2, 'plain');
    const machines = await until('2 Available machines', async () => {
      const ms = await env.machines('notarget');
      return ms.length === 2 && ms.every((m) => phaseOf(m) === MachinePhase.Available) ? ms : undefined;
    });
    for (const m of machines) {
      const types = (m.status?.addresses ?? []).map((a) => a.type).sort();
      expect(types).to.deep.equal(['Hostname', 'InternalIP']);
      expect(m.metadata.labels?.node, 'no node label without a target').to.equal(undefined);
      expect(m.spec?.providerID).to.match(/^virtual:\/\//);
    }
    const vms = async (): Promise<ConfigMap[]> =>
      (
        await env.client.list<ConfigMap>(CoreResources.configMaps, {
          namespace: NS,
          labelSelector: 'virtual.mcm-ts.io/vm=true',
        })
      ).items;
    expect(await vms()).to.have.length(2);
    const md = await env.client.get<MachineDeployment>(MachineDeploymentResource, 'notarget', NS);
    await until('the deployment reports 2 available', async () => {
      const got = await env.client.get<MachineDeployment>(MachineDeploymentResource, 'notarget', NS);
      return got.status?.availableReplicas === 2;
    });
    expect(md.metadata.name).to.equal('notarget');
    await env.scale('notarget', 0);
    await until(
      'no VM left',
      async () => (await vms()).length === 0 && (await env.machines('notarget')).length === 0,
    );
  });
});
