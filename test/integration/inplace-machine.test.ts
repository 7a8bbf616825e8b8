import { expect } from 'chai';

import { API_VERSION, MachineResource, type Machine } from '../../lib/api/types.js';
import { Informer, type DeepReadonly } from '../../lib/kube/informer.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node, Pod } from '../../lib/kube/types.js';
import { nullLogger } from '../../lib/observability/logger.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

const CANDIDATE = 'node.machine.sapcloud.io/candidate-for-update';
const SELECTED = 'node.machine.sapcloud.io/selected-for-update';
const RESULT = 'node.machine.sapcloud.io/update-result';
const FAILED_REASON = 'node.machine.sapcloud.io/update-failed-reason';

const inPlaceReason = (n: DeepReadonly<Node> | Node): string | undefined =>
  n.status?.conditions?.find((c) => c.type === 'InPlaceUpdate')?.reason;

/** Every InPlaceUpdate reason and cordon state a node shows, and every phase of a machine, in order (from watches). */
class History {
  readonly reasons: string[] = [];
  readonly phases: string[] = [];
  /** The reason the node had when it was first seen cordoned. */
  cordonedAt: string | undefined;
  private readonly nodes: Informer<Node>;
  private readonly machines: Informer<Machine>;

  constructor(
    env: LifecycleEnv,
    private readonly name: string,
  ) {
    this.nodes = new Informer<Node>({
      client: env.client,
      resource: CoreResources.nodes,
      fieldSelector: `metadata.name=${name}`,
      logger: nullLogger,
    });
    this.machines = new Informer<Machine>({
      client: env.client,
      resource: MachineResource,
      namespace: NS,
      fieldSelector: `metadata.name=${name}`,
      logger: nullLogger,
    });
    const onNode = (n: DeepReadonly<Node>): void => {
      const r = inPlaceReason(n);
      if (r !== undefined && this.reasons.at(-1) !== r) this.reasons.push(r);
      if (n.spec?.unschedulable === true && this.cordonedAt === undefined) this.cordonedAt = r ?? '(none)';
    };
    this.nodes.addHandler({
      onAdd: onNode,
      onUpdate: (_o, n) => {
        onNode(n);
      },
    });
    const onMachine = (m: DeepReadonly<Machine>): void => {
      const p = m.status?.currentStatus?.phase ?? '';
      if (this.phases.at(-1) !== p) this.phases.push(p);
    };
    this.machines.addHandler({
      onAdd: onMachine,
      onUpdate: (_o, m) => {
        onMachine(m);
      },
    });
  }

  async start(): Promise<void> {
    this.nodes.start();
    this.machines.start();
    await Promise.all([this.nodes.waitForSync(), this.machines.waitForSync()]);
  }

  async stop(): Promise<void> {
    await Promise.all([this.nodes.stop(), this.machines.stop()]);
  }

  toString(): string {
    return `${this.name}: reasons ${this.reasons.join(' → ')}; phases ${this.phases.join(' → ')}`;
  }
}

async function createMachine(
  env: LifecycleEnv,
  name: string,
  className: string,
  spec: object = {},
): Promise<void> {
  await env.client.create<Machine>(MachineResource, {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: { name, namespace: NS },
    spec: { class: { kind: 'MachineClass', name: className }, ...spec },
  });
}

async function getMachine(env: LifecycleEnv, name: string): Promise<Machine> {
  return env.client.get<Machine>(MachineResource, name, NS);
}

async function runningWithReadyNode(env: LifecycleEnv, name: string): Promise<Machine> {
  return until(
    `machine ${name} Running with a Ready node`,
    async () => {
      const m = await getMachine(env, name);
      if (phaseOf(m) !== 'Running') return undefined;
      const node = await env.client.get<Node>(CoreResources.nodes, name);
      return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true
        ? m
        : undefined;
    },
    60_000,
  );
}

async function labelNode(
  env: LifecycleEnv,
  name: string,
  labels: Record<string, string | null>,
): Promise<void> {
  await env.client.patch(CoreResources.nodes, name, { metadata: { labels } }, { type: 'merge' });
}

async function podOn(env: LifecycleEnv, podName: string, nodeName: string): Promise<void> {
  await env.client.create<Pod>(CoreResources.pods, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: podName, namespace: NS },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': nodeName },
      terminationGracePeriodSeconds: 1,
      containers: [{ name: 'app', image: 'registry.invalid/app:1' }],
    },
  });
  await until(
    `pod ${podName} Running on ${nodeName}`,
    async () => {
      const p = await env.client.get<Pod>(CoreResources.pods, podName, NS);
      return p.spec?.nodeName === nodeName && p.status?.phase === 'Running';
    },
    60_000,
  );
}

async function podGone(env: LifecycleEnv, podName: string): Promise<boolean> {
  try {
    await env.client.get(CoreResources.pods, podName, NS);
    return false;
  } catch {
    return true;
  }
}

async function machineReconciles(env: LifecycleEnv): Promise<number> {
  const text =
    (await env.manager?.registry.getSingleMetricAsString('controller_runtime_reconcile_total')) ?? '';
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('controller_runtime_reconcile_total{') && line.includes('controller="machine"'))
      sum += Number(line.split(' ').at(-1));
  }
  return sum;
}

describe('in-place update of a machine (real kube-apiserver, kube-controller-manager, kube-scheduler, kwok; the virtual update agent)', function () {
  this.timeout(240_000);
  let env: LifecycleEnv;

  before(async () => {
    // kube-controller-manager lifts the not-ready taint the apiserver puts on every new node.
    env = await LifecycleEnv.start({ controllerManager: true, scheduler: true, kwok: true });
    await env.startManager();
  });

  after(async () => {
    await env.stop();
  });

  it('takes a selected node through candidate, selection, drain and update, and the same machine back to Running', async () => {
    await env.createClass('inplace-ok', { inPlaceUpdate: { duration: '2s' } });
    await createMachine(env, 'ip-ok', 'inplace-ok');
    const before = await runningWithReadyNode(env, 'ip-ok');
    const history = new History(env, 'ip-ok');
    await history.start();
    try {
      await podOn(env, 'ip-web', 'ip-ok');

      await labelNode(env, 'ip-ok', { [CANDIDATE]: 'true' });
      await until('the node is a candidate', async () => {
        const n = await env.client.get<Node>(CoreResources.nodes, 'ip-ok');
        return inPlaceReason(n) === 'CandidateForUpdate';
      });
      const candidate = await env.client.get<Node>(CoreResources.nodes, 'ip-ok');
      expect(candidate.spec?.unschedulable, 'a candidate is not cordoned').to.not.equal(true);
      expect(await podGone(env, 'ip-web'), 'a candidate is not drained').to.be.false;

      await labelNode(env, 'ip-ok', { [SELECTED]: 'true' });
      await until('the pod is evicted', () => podGone(env, 'ip-web'), 60_000);
      const updating = await until(
        'the machine InPlaceUpdating (or past it)',
        async () => {
          const m = await getMachine(env, 'ip-ok');
          return history.phases.includes('InPlaceUpdating') ? m : undefined;
        },
        60_000,
      );
      expect(updating.metadata.uid).to.equal(before.metadata.uid);

      const node = await until(
        'the agent reports update-result=successful',
        async () => {
          const n = await env.client.get<Node>(CoreResources.nodes, 'ip-ok');
          return n.metadata.labels?.[RESULT] === 'successful' ? n : undefined;
        },
        60_000,
      );
      expect(node.metadata.annotations?.['virtual.mcm-ts.io/updated-to']).to.equal('inplace-ok');
      expect(node.spec?.unschedulable, 'cordoned for the update').to.equal(true);

      const after = await until(
        'the machine Running again after InPlaceUpdateSuccessful',
        async () => {
          const m = await getMachine(env, 'ip-ok');
          return phaseOf(m) === 'Running' && history.phases.includes('InPlaceUpdateSuccessful')
            ? m
            : undefined;
        },
        60_000,
      );
      await until(
        'the node condition says UpdateSuccessful',
        () => history.reasons.at(-1) === 'UpdateSuccessful',
      );

      expect(history.reasons, history.toString()).to.deep.equal([
        'CandidateForUpdate',
        'SelectedForUpdate',
        'DrainSuccessful',
        'ReadyForUpdate',
        'UpdateSuccessful',
      ]);
      expect(history.cordonedAt, 'cordoned once selected').to.equal('SelectedForUpdate');
      const fromRunning = history.phases.slice(history.phases.indexOf('Running'));
      expect(fromRunning, history.toString()).to.deep.equal([
        'Running',
        'InPlaceUpdating',
        'InPlaceUpdateSuccessful',
        'Running',
      ]);
      expect(after.metadata.name).to.equal('ip-ok');
      expect(after.metadata.uid, 'the same machine').to.equal(before.metadata.uid);
      expect(after.spec?.providerID, 'the same VM').to.equal(before.spec?.providerID);
      expect(after.status?.lastOperation).to.include({ type: 'HealthCheck', state: 'Successful' });
      const ready = (await env.client.get<Node>(CoreResources.nodes, 'ip-ok')).status?.conditions?.find(
        (c) => c.type === 'Ready',
      );
      expect(ready?.status).to.equal('True');
      // The machine mirrors the node's condition on a later pass than the one that made it Running.
      await until('the machine mirrors the UpdateSuccessful condition', async () => {
        const m = await getMachine(env, 'ip-ok');
        return m.status?.conditions?.find((c) => c.type === 'InPlaceUpdate')?.reason === 'UpdateSuccessful';
      });
    } finally {
      await history.stop();
    }
  });

  it('ends a failed update InPlaceUpdateFailed, then Failed after the health timeout, with the reason', async () => {
    await env.createClass('inplace-fail', {
      inPlaceUpdate: { duration: '1s', fail: true, failureReason: 'simulated kernel panic' },
    });
    await createMachine(env, 'ip-fail', 'inplace-fail', { healthTimeout: '5s' });
    const before = await runningWithReadyNode(env, 'ip-fail');
    const history = new History(env, 'ip-fail');
    await history.start();
    try {
      // Manual orchestration: both labels at once.
      await labelNode(env, 'ip-fail', { [CANDIDATE]: 'true', [SELECTED]: 'true' });
      const failedUpdate = await until(
        'the machine InPlaceUpdateFailed',
        async () => {
          const m = await getMachine(env, 'ip-fail');
          return phaseOf(m) === 'InPlaceUpdateFailed' ? m : undefined;
        },
        60_000,
      );
      expect(failedUpdate.status?.lastOperation).to.include({ type: 'InPlaceUpdate', state: 'Failed' });
      expect(failedUpdate.status?.lastOperation?.description).to.contain('simulated kernel panic');
      const node = await env.client.get<Node>(CoreResources.nodes, 'ip-fail');
      expect(node.metadata.labels?.[RESULT]).to.equal('failed');
      expect(node.metadata.annotations?.[FAILED_REASON]).to.equal('simulated kernel panic');

      const failed = await until(
        'the machine Failed after the health timeout',
        async () => {
          const m = await getMachine(env, 'ip-fail');
          return phaseOf(m) === 'Failed' ? m : undefined;
        },
        60_000,
      );
      const enteredFailedUpdate = Date.parse(failedUpdate.status?.currentStatus?.lastUpdateTime ?? '');
      const enteredFailed = Date.parse(failed.status?.currentStatus?.lastUpdateTime ?? '');
      expect(enteredFailed - enteredFailedUpdate, 'after the 5s health timeout').to.be.at.least(5000);
      expect(failed.status?.lastOperation).to.include({ type: 'InPlaceUpdate', state: 'Failed' });
      expect(failed.status?.lastOperation?.description).to.contain('simulated kernel panic');
      expect(failed.spec?.providerID).to.equal(before.spec?.providerID);

      // The node is Ready, yet the machine stays Failed: poke the node and let the controller look again.
      const seen = await machineReconciles(env);
      await env.client.patch(
        CoreResources.nodes,
        'ip-fail',
        { metadata: { annotations: { 'test.mcm-ts.io/poke': '1' } } },
        { type: 'merge' },
      );
      await until('the machine controller looked again', async () => (await machineReconciles(env)) > seen);
      expect(phaseOf(await getMachine(env, 'ip-fail'))).to.equal('Failed');
      const fromRunning = history.phases.slice(history.phases.indexOf('Running'));
      expect(fromRunning, history.toString()).to.deep.equal([
        'Running',
        'InPlaceUpdating',
        'InPlaceUpdateFailed',
        'Failed',
      ]);
      expect(history.reasons, history.toString()).to.deep.equal([
        'CandidateForUpdate',
        'SelectedForUpdate',
        'DrainSuccessful',
        'ReadyForUpdate',
        'UpdateFailed',
      ]);
    } finally {
      await history.stop();
    }
  });
});
