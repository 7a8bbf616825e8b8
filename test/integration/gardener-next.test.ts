// What gardener MCM's master (v0.63.0-dev) adds over v0.62.1, with gardener's names, against a
// real kube-apiserver: the effective-creation-timeout annotation and the failed-join counter
// (#1104), the join duration (#1104: gardener reads it from the Running lastOperation; its
// machine-join-duration annotation never lands there, and is not written here) and the duration
// histograms, and the
// empty preserve value reported as invalid (#1118). The preserved taint (#1119) is proven in
// preserve.test.ts, the PodDisruptionBudget rule (#1127) in drain.test.ts and the drain unit tests.

import { expect } from 'chai';

import { parseGoDuration } from '../../lib/api/duration.js';
import {
  API_VERSION,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineSet,
} from '../../lib/api/types.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { CoreEvent } from '../../lib/kube/types.js';
import { LifecycleEnv, NS, nodeTemplate, phaseOf } from './env/lifecycle.js';
import { unlessNotFound, until } from './env/until.js';

const CREATION_TIMEOUT = 'node.machine.sapcloud.io/effective-creation-timeout';
const JOIN_DURATION = 'node.machine.sapcloud.io/machine-join-duration';
const PRESERVE = 'node.machine.sapcloud.io/preserve';
const ZONE = 'topology.kubernetes.io/zone';

/** A deployment as gardener writes them: the template carries the `name` label. */
async function deployment(
  env: LifecycleEnv,
  name: string,
  className: string,
  annotations: Record<string, string> = {},
): Promise<MachineDeployment> {
  const labels = { name };
  return env.client.create<MachineDeployment>(MachineDeploymentResource, {
    apiVersion: API_VERSION,
    kind: 'MachineDeployment',
    metadata: { name, namespace: NS, annotations },
    spec: {
      replicas: 1,
      selector: { matchLabels: labels },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      template: {
        metadata: { labels },
        spec: {
          class: { kind: 'MachineClass', name: className },
          nodeTemplate: { metadata: { labels: { [ZONE]: 'eu-virtual-b' } } },
        },
      },
    },
  });
}

async function machinesOf(env: LifecycleEnv, name: string): Promise<Machine[]> {
  return (await env.client.list<Machine>(MachineResource, { namespace: NS, labelSelector: `name=${name}` }))
    .items;
}

/** The value of a series of the manager's registry, by its labels ('' when absent). */
async function sample(
  env: LifecycleEnv,
  metric: string,
  labels: Record<string, string>,
): Promise<number | undefined> {
  const text = (await env.manager?.registry.metrics()) ?? '';
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}{`)) continue;
    const inside = line.slice(line.indexOf('{') + 1, line.lastIndexOf('}'));
    const have = inside.split(',');
    if (want.every((w) => have.includes(w)) && have.length === want.length)
      return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return undefined;
}

/** The series' value once it exists (the observation follows the write a test waits for). */
function counted(env: LifecycleEnv, metric: string, labels: Record<string, string>): Promise<number> {
  return until(`${metric} recorded`, () => sample(env, metric, labels), 10_000);
}

describe('gardener MCM master’s additions (real kube-apiserver, the whole manager on the virtual cloud)', function () {
  this.timeout(240_000);
  let env: LifecycleEnv;

  before(async () => {
    env = await LifecycleEnv.start();
    await env.startManager();
    await env.createClass('gm', {}, { nodeTemplate: nodeTemplate({ instanceType: 'v-medium' }) });
    await env.createClass(
      'gm-never',
      // Its VM comes up but its node stays NotReady for an hour: the machine waits Pending.
      { bootDelay: '1h' },
      { nodeTemplate: nodeTemplate({ instanceType: 'v-large' }) },
    );
  });

  after(async () => {
    await env.stop();
  });

  it('fails a new machine that does not join within the deployment’s effective-creation-timeout, and counts mcm_machine_num_failed_join', async () => {
    const name = 'gm-timeout';
    await deployment(env, name, 'gm-never', { [CREATION_TIMEOUT]: '15s' });
    const sets = await until('the MachineSet carries the annotation', async () => {
      const list = await env.client.list<MachineSet>(MachineSetResource, {
        namespace: NS,
        labelSelector: `name=${name}`,
      });
      return list.items.find((s) => s.metadata.annotations?.[CREATION_TIMEOUT] === '15s');
    });
    expect(sets.metadata.annotations?.[CREATION_TIMEOUT]).to.equal('15s');
    // A Failed machine is replaced at once: the Warning event stays.
    const event = await until(
      'a machine failed for the creation timeout',
      async () => {
        const events = await env.client.list<CoreEvent>(CoreResources.events, { namespace: NS });
        return events.items.find(
          (e) =>
            e.reason === 'MachineFailed' &&
            e.involvedObject.name?.startsWith(`${name}-`) === true &&
            (e.message ?? '').includes('did not join the cluster within the creation timeout'),
        );
      },
      90_000,
    );
    // The flag's timeout is 20 minutes: the annotation's 15 s decided.
    expect(event.message).to.include('within the creation timeout of 15s');
    const pending = await machinesOf(env, name);
    expect(
      pending.map((m) => m.metadata.annotations?.[CREATION_TIMEOUT]),
      'the machines carry it too',
    ).to.include('15s');
    const count = await until('the failed join counted', () =>
      sample(env, 'mcm_machine_num_failed_join', {
        namespace: NS,
        machine_deployment: name,
        instance_type: 'v-large',
        zone: 'eu-virtual-b',
      }),
    ).catch(async (err: unknown) => {
      const text = (await env.manager?.registry.metrics()) ?? '';
      const lines = text.split('\n').filter((l) => l.startsWith('mcm_machine_num_failed_join'));
      throw new Error(`${String(err)}; series: ${lines.join(' | ')}`);
    });
    expect(count).to.be.at.least(1);
    await env.client.delete(MachineDeploymentResource, name, { namespace: NS });
  });

  it('records the join duration in the Running lastOperation (no machine-join-duration annotation, as gardener’s never lands) and the create, initialize, join, drain and delete durations with gardener’s labels', async () => {
    const name = 'gm-join';
    await deployment(env, name, 'gm');
    const m = await until(
      'a Running machine',
      async () => (await machinesOf(env, name)).find((x) => phaseOf(x) === 'Running'),
      60_000,
    );
    // What gardener's join tracking reads: the Running lastOperation's time less the creation time.
    const upTo =
      Date.parse(m.status?.lastOperation?.lastUpdateTime ?? '') -
      Date.parse(m.metadata.creationTimestamp ?? '');
    expect(upTo, 'the join time from the lastOperation').to.be.at.least(0);
    const said = /successfully joined the cluster in (\S+)$/.exec(m.status?.lastOperation?.description ?? '');
    expect(said, m.status?.lastOperation?.description).to.not.equal(null);
    expect(parseGoDuration(said?.[1] ?? ''), 'the described join duration').to.be.within(0, upTo + 1_000);
    const labels = {
      namespace: NS,
      machine_deployment: name,
      instance_type: 'v-medium',
      zone: 'eu-virtual-b',
    };
    // Each duration is observed once its status write has come back, so the metric can trail the
    // Running phase a reader sees by a moment: wait for the series, then assert its count.
    for (const metric of ['create', 'initialize', 'join']) {
      expect(await counted(env, `mcm_machine_${metric}_duration_seconds_count`, labels), metric).to.equal(1);
    }
    // Read after the join was counted (the annotation, when it was written, followed at once).
    const joined = await env.client.get<Machine>(MachineResource, m.metadata.name ?? '', NS);
    expect(joined.metadata.annotations?.[JOIN_DURATION], 'no annotation written').to.equal(undefined);
    await env.scale(name, 0);
    await until(
      'the machine deleted',
      async () =>
        (await unlessNotFound(env.client.get(MachineResource, m.metadata.name ?? '', NS))) === undefined,
      60_000,
    );
    expect(await counted(env, 'mcm_machine_delete_duration_seconds_count', labels), 'delete').to.equal(1);
    expect(
      await counted(env, 'mcm_machine_drain_duration_seconds_count', {
        namespace: NS,
        machine_deployment: name,
      }),
      'drain',
    ).to.equal(1);
    await env.client.delete(MachineDeploymentResource, name, { namespace: NS });
  });

  it('reports an empty preserve value on the node as invalid and neither starts nor stops preservation for it', async () => {
    const name = 'gm-preserve';
    await deployment(env, name, 'gm');
    const m = await until(
      'a Running machine',
      async () => (await machinesOf(env, name)).find((x) => phaseOf(x) === 'Running'),
      60_000,
    );
    const node = m.metadata.labels?.node ?? '';
    const annotateNode = (v: string | null): Promise<unknown> =>
      env.client.patch(
        CoreResources.nodes,
        node,
        { metadata: { annotations: { [PRESERVE]: v } } },
        { type: 'merge' },
      );
    const expiry = async (): Promise<string | undefined> =>
      (await env.client.get<Machine>(MachineResource, m.metadata.name ?? '', NS)).status?.currentStatus
        ?.preserveExpiryTime;

    await annotateNode('');
    const invalid = await until('the invalid value reported', async () => {
      const events = await env.client.list<CoreEvent>(CoreResources.events, {
        namespace: NS,
        fieldSelector: `involvedObject.name=${m.metadata.name ?? ''}`,
      });
      return events.items.find((e) => e.reason === 'InvalidPreserveValue');
    });
    expect(invalid.message).to.include(`${PRESERVE}="" on the node is invalid`);
    expect(await expiry(), 'not preserved for an empty value').to.equal(undefined);

    await annotateNode('now');
    const until1 = await until('preserved for now', expiry);
    // Empty again: nothing changes (it is not "stop").
    await annotateNode('');
    await new Promise((r) => setTimeout(r, 3_000));
    expect(await expiry(), 'still preserved').to.equal(until1);
    // Removed: preservation stops.
    await annotateNode(null);
    await until('preservation stopped', async () => (await expiry()) === undefined);
    await env.client.delete(MachineDeploymentResource, name, { namespace: NS });
  });
});
