import { expect } from 'chai';

import { MachineResource, type Machine } from '../../../../lib/api/types.js';
import { VmNoticeHandler } from '../../../../lib/controllers/notices/handler.js';
import { VmNoticeKind, type VmNotice } from '../../../../lib/driver/notices.js';
import { ConflictError } from '../../../../lib/kube/errors.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import type { Node } from '../../../../lib/kube/types.js';
import { NS, machine, machineSet } from '../builders.js';
import { ControllerTestEnv } from '../env.js';

const ID = 'i-0123456789abcdef0';
const REPLACING = 'machine.mcm-ts.io/replacing';
const DEADLINE = 'machine.mcm-ts.io/interruption-deadline';

function withVm(name: string, opts: Parameters<typeof machine>[1] = {}): Machine {
  const m = machine(name, { owner: machineSet('ms', 2), labels: { node: `ip-${name}` }, ...opts });
  // The driver records the region; a notice names the instance (vmKey matches on the id).
  m.spec = { ...m.spec, providerID: `aws:///eu-west-1/${name === 'a' ? ID : 'i-0fedcba9876543210'}` };
  return m;
}

function nodeOf(name: string): Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: `ip-${name}`, labels: { 'node.gardener.cloud/machine-name': name } },
    spec: { providerID: `aws:///eu-west-1a/${ID}` },
    status: { conditions: [{ type: 'Ready', status: 'True' }] },
  };
}

describe('VmNoticeHandler: notices recorded on the machines (in-memory API)', () => {
  let env: ControllerTestEnv;
  let handler: VmNoticeHandler;

  async function setup(...machines: Machine[]): Promise<void> {
    env = new ControllerTestEnv();
    for (const m of machines) env.seed(MachineResource, m);
    env.seed(CoreResources.nodes, nodeOf('a'));
    handler = new VmNoticeHandler({
      client: env.api,
      target: env.target,
      machines: env.informers.machines,
      nodes: env.informers.nodes,
      recorder: env.recorder,
      clock: env.clock,
      logger: env.logger,
    });
    await env.start();
    env.api.clearActions();
    env.target.clearActions();
  }

  afterEach(async () => {
    await env.stop();
  });

  const now = (): number => env.clock.now();
  const spot = (): VmNotice => ({
    kind: VmNoticeKind.Interruption,
    // The zone where the machine has the region: the same VM.
    providerID: `aws:///eu-west-1/${ID}`,
    reason: 'SpotInterruption',
    message: `EC2 Spot interruption warning for instance ${ID}`,
    sentAt: now(),
    deadline: now() + 90_000,
  });
  const machineWrites = (): string[] =>
    env.api
      .writes()
      .filter((w) => w.resource.startsWith('machines.'))
      .map((w) => `${w.verb}${w.subresource === undefined ? '' : `/${w.subresource}`} ${w.name ?? ''}`);

  it('finds the machine by its VM and records replacing and the deadline in one conditional patch, with an event', async () => {
    await setup(withVm('a'), withVm('b'));
    expect(await handler.handle(spot())).to.equal('acted');
    expect(machineWrites()).to.deep.equal(['patch a']);
    const patch = env.api.writes()[0]?.body as { metadata: { resourceVersion?: string } };
    expect(patch.metadata.resourceVersion, 'conditional on what was read').to.be.a('string');
    const a = env.api.peek<Machine>(MachineResource, 'a', NS);
    expect(a?.metadata.annotations).to.deep.include({
      [REPLACING]: 'interrupted',
      [DEADLINE]: new Date(now() + 90_000).toISOString(),
    });
    expect(env.recorder.events).to.have.length(1);
    expect(env.recorder.events[0]).to.deep.include({ type: 'Warning', reason: 'SpotInterruption' });
    expect(env.recorder.events[0]?.subject.name).to.equal('a');
  });

  it('acts once on two copies of a notice arriving together (one at a time per VM, the second reads the first’s record)', async () => {
    await setup(withVm('a'));
    // The cache never shows the first record: the second copy must read the API.
    env.api.holdWatches();
    const outcomes = await Promise.all([handler.handle(spot()), handler.handle(spot())]);
    expect(outcomes).to.deep.equal(['acted', 'duplicate']);
    expect(machineWrites().filter((w) => w.startsWith('patch'))).to.have.length(1);
    expect(env.recorder.events).to.have.length(1);
    env.api.releaseWatches();
  });

  it('answers unknown for a VM no machine has, writing nothing', async () => {
    await setup(withVm('b'));
    expect(await handler.handle(spot())).to.equal('unknown');
    expect(env.api.writes()).to.deep.equal([]);
  });

  it('reads again and retries when the machine changed between its read and the write', async () => {
    await setup(withVm('a'));
    let conflicts = 1;
    env.api.react((a) =>
      a.verb === 'patch' && a.resource.startsWith('machines.') && conflicts-- > 0
        ? new ConflictError('the object has been modified', 409, 'Conflict')
        : undefined,
    );
    expect(await handler.handle(spot())).to.equal('acted');
    expect(env.api.peek<Machine>(MachineResource, 'a', NS)?.metadata.annotations?.[REPLACING]).to.equal(
      'interrupted',
    );
  });

  it('records a stopped VM on its machine in one conditional patch and leaves the Failed phase to the machine controller (its replacement budget)', async () => {
    await setup(withVm('a'));
    const outcome = await handler.handle({
      kind: VmNoticeKind.Stopped,
      providerID: `aws:///eu-west-1/${ID}`,
      reason: 'InstanceStopped',
      message: `EC2 reports instance ${ID} stopped`,
      sentAt: now(),
    });
    expect(outcome).to.equal('acted');
    expect(machineWrites()).to.deep.equal(['patch a']);
    const a = env.api.peek<Machine>(MachineResource, 'a', NS);
    expect(a?.status?.currentStatus?.phase).to.equal('Running');
    expect(a?.metadata.annotations).to.deep.include({ 'machine.mcm-ts.io/vm-failure': 'InstanceStopped' });
    expect(a?.metadata.annotations?.[DEADLINE]).to.be.a('string');
    expect(env.recorder.events[0]?.message).to.contain('did not ask for');
  });

  it('withdraws an impairment recorded on a machine not failed yet when its instance recovers: the annotation removed', async () => {
    const a = withVm('a');
    a.metadata.annotations = {
      ...a.metadata.annotations,
      'machine.mcm-ts.io/vm-failure': 'InstanceImpaired',
    };
    await setup(a);
    const outcome = await handler.handle({
      kind: VmNoticeKind.Recovered,
      providerID: `aws:///eu-west-1/${ID}`,
      reason: 'InstanceRecovered',
      message: `EC2 reports instance ${ID}'s status checks no longer impaired`,
      sentAt: now(),
      withdraws: 'InstanceImpaired',
    });
    expect(outcome).to.equal('acted');
    expect(machineWrites()).to.deep.equal(['patch a']);
    const after = env.api.peek<Machine>(MachineResource, 'a', NS);
    expect(after?.metadata.annotations?.['machine.mcm-ts.io/vm-failure']).to.equal(undefined);
    expect(env.recorder.events[0]?.reason).to.equal('InstanceRecovered');
  });

  it('deletes an interrupted machine no set owns, with a uid precondition', async () => {
    const lone = withVm('a');
    delete lone.metadata.ownerReferences;
    await setup(lone);
    expect(await handler.handle(spot())).to.equal('acted');
    expect(machineWrites()).to.deep.equal(['patch a', 'delete a']);
  });

  it('puts the RebalanceRecommended condition on the node through the status subresource', async () => {
    await setup(withVm('a'));
    const outcome = await handler.handle({
      kind: VmNoticeKind.Rebalance,
      providerID: `aws:///eu-west-1/${ID}`,
      reason: 'RebalanceRecommendation',
      message: 'EC2 rebalance recommendation',
      sentAt: now(),
    });
    expect(outcome).to.equal('acted');
    expect(machineWrites(), 'the machine is not touched').to.deep.equal([]);
    const writes = env.target.writes().map((w) => `${w.verb}/${w.subresource ?? ''} ${w.name ?? ''}`);
    expect(writes).to.deep.equal(['patch/status ip-a']);
    const n = env.target.peek<Node>(CoreResources.nodes, 'ip-a');
    expect(n?.status?.conditions?.map((c) => `${c.type}=${c.status}`)).to.include(
      'RebalanceRecommended=True',
    );
  });
});
