import { expect } from 'chai';

import { MachinePhase } from '../../lib/api/constants.js';
import {
  API_VERSION,
  MachineClassResource,
  MachineResource,
  type Machine,
  type MachineClass,
} from '../../lib/api/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent, Node, NodeCondition } from '../../lib/kube/types.js';
import { DEFAULT_SHAPE } from '../../lib/providers/virtual/spec.js';
import { buildVmNode } from '../../lib/providers/virtual/vm.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { unlessNotFound, until } from './env/until.js';

const NOT_MANAGED = 'node.machine.sapcloud.io/not-managed-by-mcm';

async function eventsFor(env: LifecycleEnv, name: string): Promise<CoreEvent[]> {
  const list = await env.client.list<CoreEvent>(CoreResources.events, {
    namespace: NS,
    fieldSelector: `involvedObject.name=${name}`,
  });
  return list.items;
}

async function metric(env: LifecycleEnv, name: string): Promise<number> {
  const m = await env.manager?.registry.getSingleMetric(name)?.get();
  return (m?.values ?? []).reduce((sum, v) => sum + v.value, 0);
}

/** Finished passes of one controller (its successful reconciles). */
async function passes(env: LifecycleEnv, controller: string): Promise<number> {
  const m = await env.manager?.registry.getSingleMetric('controller_runtime_reconcile_total')?.get();
  return (m?.values ?? [])
    .filter((v) => v.labels.controller === controller && v.labels.result === 'success')
    .reduce((sum, v) => sum + v.value, 0);
}

function getMachine(env: LifecycleEnv, name: string): Promise<Machine | undefined> {
  return unlessNotFound(env.client.get<Machine>(MachineResource, name, NS));
}

async function nodeExists(env: LifecycleEnv, name: string): Promise<boolean> {
  return (await unlessNotFound(env.client.get<Node>(CoreResources.nodes, name))) !== undefined;
}

/** A virtual VM made behind the manager's back: its Node, as the virtual cloud records it. */
function vmNode(name: string, machineName: string, className: string): Node {
  return buildVmNode(
    {
      name,
      machine: `${NS}/${machineName}`,
      machineClass: className,
      shape: DEFAULT_SHAPE,
      bootAt: 0,
      notReadyAt: undefined,
      bootNeverCompletes: false,
    },
    Date.now(),
  );
}

function machineOf(name: string, className: string): Machine {
  return {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: { name, namespace: NS },
    spec: { class: { kind: 'MachineClass', name: className } },
  };
}

describe('provider-side safety: orphan VMs and nodes without machines (real kube-apiserver)', function () {
  this.timeout(180_000);
  let env: LifecycleEnv;
  const creationTimeoutMs = 20_000;

  before(async () => {
    env = await LifecycleEnv.start();
    await env.startManager({
      machineSafetyOrphanVmsPeriodMs: 2_000,
      machineCreationTimeoutMs: creationTimeoutMs,
    });
  });

  after(async () => {
    await env.stop();
  });

  it('a VM created behind our back is collected on the next orphan pass, while the VM of a machine still being created is kept and adopted', async () => {
    await env.createClass('orph');
    // Every call of this class's driver takes 8 s, so the creation of its machine is in flight
    // (machine without providerID) for a while after its VM already exists.
    await env.createClass('orph-slow', { apiLatency: '8s' });
    await env.client.create(CoreResources.nodes, vmNode('slow', 'slow', 'orph-slow'));
    await env.client.create(MachineResource, machineOf('slow', 'orph-slow'));
    await until('the manager sees the machine being created', async () => {
      const m = await getMachine(env, 'slow');
      return (m?.metadata.finalizers ?? []).length > 0;
    });
    await env.client.create(CoreResources.nodes, vmNode('ghost-vm', 'ghost', 'orph'));
    const before = await metric(env, 'mcm_machine_safety_orphan_vms_collected_total');

    await until('the orphan VM is deleted', async () => !(await nodeExists(env, 'ghost-vm')), 30_000);
    const slow = await getMachine(env, 'slow');
    expect(slow?.spec?.providerID ?? '', 'the pass ran while the machine was still being created').to.equal(
      '',
    );
    expect(await nodeExists(env, 'slow'), 'the VM of the machine being created is kept').to.equal(true);
    expect(await metric(env, 'mcm_machine_safety_orphan_vms_collected_total')).to.equal(before + 1);
    const events = await until('an OrphanVMDeleted event on the class', async () => {
      const evs = await eventsFor(env, 'orph');
      return evs.some((e) => e.reason === 'OrphanVMDeleted') ? evs : undefined;
    });
    expect(events.find((e) => e.reason === 'OrphanVMDeleted')?.message).to.contain('ghost');

    const adopted = await until(
      'the machine adopts its VM and runs',
      async () => {
        const m = await getMachine(env, 'slow');
        return m !== undefined && phaseOf(m) === MachinePhase.Running ? m : undefined;
      },
      60_000,
    );
    expect(adopted.spec?.providerID).to.equal('virtual://virtual-zone-a/slow');
    // Two full collection passes later, the adopted VM is still there.
    const start = await passes(env, 'safety-orphan-vms');
    await until(
      'two more orphan collection passes',
      async () => (await passes(env, 'safety-orphan-vms')) >= start + 2,
    );
    expect(await nodeExists(env, 'slow')).to.equal(true);
    expect(await metric(env, 'mcm_machine_safety_orphan_vms_collected_total')).to.equal(before + 1);
  });

  it('a node without a machine is annotated not-managed-by-mcm once older than the creation timeout, and loses the annotation when a machine claims it', async () => {
    const created = await env.client.create<Node>(CoreResources.nodes, {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'stray' },
    });
    const createdAt = Date.parse(created.metadata.creationTimestamp ?? '');
    const annotated = await until(
      'the annotation',
      async () => {
        const n = await env.client.get<Node>(CoreResources.nodes, 'stray');
        return n.metadata.annotations?.[NOT_MANAGED] !== undefined ? { node: n, at: Date.now() } : undefined;
      },
      creationTimeoutMs + 30_000,
    );
    expect(annotated.node.metadata.annotations?.[NOT_MANAGED]).to.equal('1');
    // creationTimestamp has second precision.
    expect(annotated.at - createdAt, 'not before the creation timeout').to.be.at.least(
      creationTimeoutMs - 1000,
    );

    // A machine claims the node (its class does not exist, so nothing else happens to it).
    await env.client.create(MachineResource, {
      ...machineOf('claimer', 'no-such-class'),
      metadata: { name: 'claimer', namespace: NS, labels: { node: 'stray' } },
    });
    await until('the annotation is removed', async () => {
      const n = await env.client.get<Node>(CoreResources.nodes, 'stray');
      return n.metadata.annotations?.[NOT_MANAGED] === undefined;
    });
  });
});

async function classExists(env: LifecycleEnv, name: string): Promise<boolean> {
  return (await unlessNotFound(env.client.get(MachineClassResource, name, NS))) !== undefined;
}

describe('provider-side safety: VMs whose providerID write was lost outlive neither machine nor class (real kube-apiserver)', function () {
  this.timeout(180_000);
  let env: LifecycleEnv;

  before(async () => {
    env = await LifecycleEnv.start();
    // No periodic pass within the test: only the passes these mechanisms run can collect a VM.
    await env.startManager({ machineSafetyOrphanVmsPeriodMs: 60 * 60_000 });
  });

  after(async () => {
    await env.stop();
  });

  it('a class being deleted goes only after the VM of a machine that is already gone has been collected', async () => {
    await env.createClass('lost');
    await env.client.create(MachineResource, machineOf('keeper', 'lost'));
    await until(
      'the machine runs and its class carries the finalizer',
      async () => {
        const m = await getMachine(env, 'keeper');
        const cls = await env.client.get<MachineClass>(MachineClassResource, 'lost', NS);
        return (
          m !== undefined && phaseOf(m) === MachinePhase.Running && (cls.metadata.finalizers ?? []).length > 0
        );
      },
      60_000,
    );
    // The VM the driver created for machine lost-m, whose providerID write was lost; the machine
    // object went without a deletion flow (its finalizer removed by hand).
    await env.client.create(CoreResources.nodes, vmNode('lost-m', 'lost-m', 'lost'));
    await env.client.delete(MachineClassResource, 'lost', { namespace: NS });
    await env.client.delete(MachineResource, 'keeper', { namespace: NS });
    await until('the class is gone', async () => !(await classExists(env, 'lost')), 60_000);
    expect(await nodeExists(env, 'lost-m'), 'the VM went before its class').to.equal(false);
    expect(await nodeExists(env, 'keeper'), 'the machine’s own VM went with it').to.equal(false);
  });

  it('the VM of a machine deleted after its class was forced away is collected through the provider’s inventory', async () => {
    await env.createClass('forced');
    // VM created, providerID write lost; then the class is deleted (no machine refers to it yet,
    // so nothing holds it) and the machine is deleted: its deletion flow has neither providerID
    // nor class to reach the VM with.
    await env.client.create(CoreResources.nodes, vmNode('stray-m', 'stray-m', 'forced'));
    await env.client.delete(MachineClassResource, 'forced', { namespace: NS });
    await until('the class is gone', async () => !(await classExists(env, 'forced')));
    await env.client.create(MachineResource, machineOf('stray-m', 'forced'));
    await until('the manager took the machine on', async () => {
      const m = await getMachine(env, 'stray-m');
      return (m?.metadata.finalizers ?? []).length > 0;
    });
    await env.client.delete(MachineResource, 'stray-m', { namespace: NS });
    await until('the machine is gone', async () => (await getMachine(env, 'stray-m')) === undefined, 60_000);
    await until('the VM is collected', async () => !(await nodeExists(env, 'stray-m')), 30_000);
  });
});

describe('provider-side safety: API-server freeze (real kube-apiserver stopped and restarted)', function () {
  this.timeout(240_000);
  let env: LifecycleEnv;

  before(async () => {
    env = await LifecycleEnv.start();
    await env.startManager({
      machineSafetyApiserverStatuscheckPeriodMs: 2_000,
      machineSafetyApiserverStatuscheckTimeoutMs: 2_000,
    });
  });

  after(async () => {
    await env.stop();
  });

  const setReady = async (node: string, status: 'True' | 'Unknown'): Promise<void> => {
    const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    const ready: NodeCondition =
      status === 'True'
        ? { type: 'Ready', status, reason: 'KubeletReady', message: 'kubelet is posting ready status' }
        : {
            type: 'Ready',
            status,
            reason: 'NodeStatusUnknown',
            message: 'Kubelet stopped posting node status.',
          };
    await env.client.patch(
      CoreResources.nodes,
      node,
      { status: { conditions: [{ ...ready, lastHeartbeatTime: now, lastTransitionTime: now }] } },
      { type: 'strategic', subresource: 'status' },
    );
  };

  it('stopping the kube-apiserver for longer than the freeze timeout freezes reconciliation and restarting it unfreezes, with no machine marked Failed because of the outage', async () => {
    const healthTimeoutMs = 10_000;
    await env.createClass('frz');
    await env.createDeployment('frz', 1, 'frz', {}, { healthTimeout: '10s' });
    const m = await until('a Running machine', async () =>
      (await env.machines('frz')).find((x) => phaseOf(x) === MachinePhase.Running),
    );
    const name = m.metadata.name ?? '';
    expect(await metric(env, 'mcm_machine_controller_frozen')).to.equal(0);

    // The node stops reporting (as the kubelets do when they cannot reach the API server).
    await setReady(name, 'Unknown');
    await until('the machine is Unknown', async () => {
      const got = await getMachine(env, name);
      return got !== undefined && phaseOf(got) === MachinePhase.Unknown;
    });
    const unknownAt = Date.now();

    await env.cp.stopApiServer();
    await until(
      'the machine controller is frozen',
      async () => (await metric(env, 'mcm_machine_controller_frozen')) === 1,
      30_000,
    );
    // Keep the API server down until the machine's health timeout has certainly run out.
    const wait = unknownAt + healthTimeoutMs + 3_000 - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    expect(
      await metric(env, 'mcm_machine_controller_frozen'),
      'still frozen while the API server is down',
    ).to.equal(1);
    const restartedAt = Date.now();
    await env.cp.startApiServer();

    await until(
      'the machine controller is unfrozen',
      async () => (await metric(env, 'mcm_machine_controller_frozen')) === 0,
      60_000,
    );
    const reset = await until('a HealthTimeoutReset event on the machine', async () => {
      const evs = await eventsFor(env, name);
      return evs.find((e) => e.reason === 'HealthTimeoutReset');
    });
    expect(reset.type).to.equal('Normal');

    // The kubelet reports again; the machine runs on, its health clock restarted after the outage.
    await setReady(name, 'True');
    const running = await until(
      'the same machine Running again',
      async () => {
        const got = await getMachine(env, name);
        return got !== undefined && phaseOf(got) === MachinePhase.Running ? got : undefined;
      },
      60_000,
    );
    expect(Date.parse(running.status?.currentStatus?.lastUpdateTime ?? '')).to.be.at.least(
      Math.floor(restartedAt / 1000) * 1000,
    );
    const machines = await env.machines('frz');
    expect(
      machines.map((x) => x.metadata.name),
      'no replacement machine',
    ).to.deep.equal([name]);
    const failedEvents = (await eventsFor(env, name)).filter((e) => e.reason === 'MachineFailed');
    expect(failedEvents, 'never marked Failed').to.have.length(0);
  });
});
