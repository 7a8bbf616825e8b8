import { status } from '@grpc/grpc-js';
import { expect } from 'chai';

import { Annotation } from '../../../lib/api/constants.js';
import type { Machine, MachineClass, MachineDeployment, MachineSet } from '../../../lib/api/types.js';
import { API_VERSION } from '../../../lib/api/types.js';
import { replicasOf } from '../../../lib/api/replicas.js';
import {
  discoverGroups,
  GroupAnnotation,
  parseGroupId,
  parseNodeGroupFlag,
  type NodeGroup,
} from '../../../lib/autoscaler/groups.js';
import {
  carriesTemplate,
  joinedAt,
  justReady,
  instanceOf,
  isRegistered,
  machineOfPlaceholder,
  placeholderId,
} from '../../../lib/autoscaler/instances.js';
import { decodeNode, encodeNode } from '../../../lib/autoscaler/proto.js';
import {
  planDecrease,
  planDeleteNodes,
  planIncrease,
  rolloutInProgress,
} from '../../../lib/autoscaler/scaling.js';
import { buildTemplateNode } from '../../../lib/autoscaler/template.js';
import type { Node } from '../../../lib/kube/types.js';
import { ConfigError, parseArgs } from '../../../lib/config.js';

const NS = 'default';
const NOW = Date.parse('2026-11-23T10:00:00Z');

function mcd(
  name: string,
  replicas: number,
  annotations: Record<string, string> = {},
  className = 'small',
): MachineDeployment {
  return {
    apiVersion: API_VERSION,
    kind: 'MachineDeployment',
    metadata: { name, namespace: NS, uid: `uid-${name}`, annotations },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          class: { kind: 'MachineClass', name: className },
          nodeTemplate: {
            metadata: { labels: { pool: name } },
            spec: { taints: [{ key: 'k', value: 'v', effect: 'NoSchedule' }] },
          },
        },
      },
    },
  };
}

function set(name: string, replicas: number, template: MachineDeployment): MachineSet {
  return {
    apiVersion: API_VERSION,
    kind: 'MachineSet',
    metadata: { name, namespace: NS, uid: `uid-${name}` },
    spec: {
      replicas,
      ...(template.spec?.template === undefined ? {} : { template: structuredClone(template.spec.template) }),
    },
    status: { replicas },
  };
}

function machine(
  name: string,
  opts: {
    phase?: string;
    deleting?: boolean;
    lastOp?: Machine['status'] extends infer S ? (S extends { lastOperation?: infer L } ? L : never) : never;
    created?: string;
  } = {},
): Machine {
  return {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: {
      name,
      namespace: NS,
      creationTimestamp: opts.created ?? '2026-11-23T09:00:00Z',
      ...(opts.deleting === true ? { deletionTimestamp: '2026-11-23T09:30:00Z' } : {}),
    },
    status: {
      currentStatus: { phase: (opts.phase ?? 'Running') as never },
      ...(opts.lastOp === undefined ? {} : { lastOperation: opts.lastOp }),
    },
  };
}

const node = (providerID: string): Node => ({ metadata: { name: 'n' }, spec: { providerID } });
const group = (over: Partial<NodeGroup> = {}): NodeGroup => ({
  id: `${NS}/md`,
  namespace: NS,
  name: 'md',
  min: 1,
  max: 5,
  source: 'flag',
  ...over,
});

describe('autoscaler node groups', () => {
  it('parses --nodes MIN:MAX:NAMESPACE.NAME, the name may contain dots', () => {
    expect(parseNodeGroupFlag('1:10:shoot--a.worker.pool-1')).to.deep.equal({
      min: 1,
      max: 10,
      namespace: 'shoot--a',
      name: 'worker.pool-1',
    });
  });
  for (const bad of ['1:10', '1:10:nodots', 'a:10:ns.n', '5:2:ns.n', '1:10:.n', '1:10:ns.', '-1:3:ns.n']) {
    it(`rejects --nodes ${bad} with a message`, () => {
      expect(() => parseNodeGroupFlag(bad)).to.throw(/MIN|MAX|NAMESPACE|below/);
    });
  }
  it('parses group ids NAMESPACE/NAME only', () => {
    expect(parseGroupId('ns/name')).to.deep.equal({ namespace: 'ns', name: 'name' });
    expect(parseGroupId('name')).to.equal(undefined);
    expect(parseGroupId('a/b/c')).to.equal(undefined);
  });
  it('discovers flag and annotation groups; annotations override; invalid and max 0 are not served', () => {
    const { groups, problems } = discoverGroups(
      [
        mcd('flag', 1),
        mcd('over', 1, { [GroupAnnotation.MaxSize]: '9' }),
        mcd('ann', 1, { [GroupAnnotation.MinSize]: '2', [GroupAnnotation.MaxSize]: '4' }),
        mcd('half', 1, { [GroupAnnotation.MinSize]: '2' }),
        mcd('bad', 1, { [GroupAnnotation.MinSize]: 'x', [GroupAnnotation.MaxSize]: '4' }),
        mcd('inverted', 1, { [GroupAnnotation.MinSize]: '5', [GroupAnnotation.MaxSize]: '4' }),
        mcd('zero', 1, { [GroupAnnotation.MinSize]: '0', [GroupAnnotation.MaxSize]: '0' }),
        mcd('plain', 1),
      ],
      [
        { min: 0, max: 3, namespace: NS, name: 'flag' },
        { min: 1, max: 3, namespace: NS, name: 'over' },
      ],
    );
    expect(groups.map((g) => `${g.id}=${g.min}:${g.max}/${g.source}`)).to.deep.equal([
      'default/ann=2:4/annotations',
      'default/flag=0:3/flag',
      'default/over=1:9/annotations',
    ]);
    expect(problems.map((p) => p.id).sort()).to.deep.equal([
      'default/bad',
      'default/half',
      'default/inverted',
    ]);
  });
});

describe('autoscaler instances', () => {
  it('uses the Node providerID once registered, a placeholder before', () => {
    expect(instanceOf(machine('m1'), node('virtual://z/m1'), false, NOW)).to.deep.equal({
      id: 'virtual://z/m1',
      status: { instanceState: 'instanceRunning' },
    });
    expect(instanceOf(machine('m1', { phase: 'Pending' }), undefined, false, NOW)).to.deep.equal({
      id: 'requested://m1',
      status: { instanceState: 'instanceCreating' },
    });
    expect(machineOfPlaceholder(placeholderId('m1'))).to.equal('m1');
    expect(machineOfPlaceholder('virtual://z/m1')).to.equal(undefined);
  });
  it('keeps a machine whose node registered before it joined unregistered: placeholder id, Creating', () => {
    // The node may be Ready before it carries its template's labels and taints; counted as the
    // group's capacity then, the autoscaler would scale up again for pods that cannot use it.
    for (const phase of ['Pending', 'Available', 'CrashLoopBackOff', '']) {
      const m = machine('m1', { phase });
      expect(isRegistered(m, node('virtual://z/m1'), NOW), `phase "${phase}"`).to.equal(false);
      expect(instanceOf(m, node('virtual://z/m1'), false, NOW), `phase "${phase}"`).to.deep.equal({
        id: 'requested://m1',
        status: { instanceState: 'instanceCreating' },
      });
    }
    for (const phase of ['Running', 'Unknown', 'Failed', 'InPlaceUpdating']) {
      expect(
        isRegistered(machine('m1', { phase }), node('virtual://z/m1'), NOW),
        `phase "${phase}"`,
      ).to.equal(true);
    }
    expect(isRegistered(machine('m1'), node(''), NOW), 'a node without providerID').to.equal(false);
  });
  it('keeps a node that turned Ready moments ago unregistered while a not-ready taint is still on it (up to 60 s)', () => {
    const readyFor = (ms: number, taints: string[]): Node => ({
      metadata: { name: 'n' },
      spec: { providerID: 'virtual://z/m1', taints: taints.map((key) => ({ key, effect: 'NoExecute' })) },
      status: {
        conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: new Date(NOW - ms).toISOString() }],
      },
    });
    const m = machine('m1');
    expect(justReady(readyFor(2_000, ['node.kubernetes.io/not-ready']), NOW)).to.equal(true);
    expect(isRegistered(m, readyFor(2_000, ['node.kubernetes.io/not-ready']), NOW)).to.equal(false);
    expect(
      instanceOf(m, readyFor(2_000, ['node.kubernetes.io/network-unavailable']), false, NOW).id,
    ).to.equal('requested://m1');
    expect(isRegistered(m, readyFor(2_000, ['example.com/dedicated']), NOW), 'another taint').to.equal(true);
    expect(isRegistered(m, readyFor(2_000, []), NOW), 'no taint').to.equal(true);
    expect(
      isRegistered(m, readyFor(61_000, ['node.kubernetes.io/not-ready']), NOW),
      'a taint past 60 s',
    ).to.equal(true);
    expect(
      isRegistered(m, readyFor(2_000, ['node.kubernetes.io/not-ready'])),
      'a group without options: counted as it is',
    ).to.equal(true);
  });
  it('measures a just-Ready node from its machine joining when the Ready condition dates its transition earlier (kwok, a kubelet with a slow clock)', () => {
    // kwok initializes a node's conditions with the node's creation time as their
    // lastTransitionTime: a node that booted for 90 s claims to be Ready for 90 s at once.
    const old: Node = {
      metadata: { name: 'n' },
      spec: {
        providerID: 'virtual://z/m1',
        taints: [{ key: 'node.kubernetes.io/not-ready', effect: 'NoExecute' }],
      },
      status: {
        conditions: [
          { type: 'Ready', status: 'True', lastTransitionTime: new Date(NOW - 90_000).toISOString() },
        ],
      },
    };
    const joined = (ago: number): Machine =>
      machine('m1', {
        lastOp: {
          type: 'Create',
          state: 'Successful',
          description: 'joined',
          lastUpdateTime: new Date(NOW - ago).toISOString(),
        } as never,
      });
    expect(joinedAt(joined(1_000))).to.equal(NOW - 1_000);
    expect(isRegistered(joined(1_000), old, NOW), 'joined 1 s ago').to.equal(false);
    expect(instanceOf(joined(1_000), old, false, NOW).id).to.equal('requested://m1');
    expect(isRegistered(joined(61_000), old, NOW), 'joined 61 s ago').to.equal(true);
    expect(isRegistered(machine('m1'), old, NOW), 'no join recorded: the condition decides').to.equal(true);
    const failedOp = machine('m1', {
      lastOp: {
        type: 'Create',
        state: 'Failed',
        description: 'x',
        lastUpdateTime: new Date(NOW).toISOString(),
      } as never,
    });
    expect(joinedAt(failedOp), 'a failed creation is no join').to.equal(undefined);
    expect(isRegistered(joined(1_000), old), 'a group without options: counted as it is').to.equal(true);
  });
  it('keeps a joined machine unregistered while its node lacks the labels of its node template', () => {
    const m = machine('m1');
    m.spec = { nodeTemplate: { metadata: { labels: { pool: 'a', tier: 'web' } } } };
    const labelled = (labels: Record<string, string>): Node => ({
      metadata: { name: 'n', labels },
      spec: { providerID: 'virtual://z/m1' },
    });
    expect(carriesTemplate({ pool: 'a', tier: 'web', extra: 'x' }, m)).to.equal(true);
    expect(carriesTemplate({ pool: 'a' }, m)).to.equal(false);
    expect(carriesTemplate({ pool: 'b', tier: 'web' }, m)).to.equal(false);
    expect(carriesTemplate(undefined, m)).to.equal(false);
    expect(carriesTemplate(undefined, machine('m2')), 'no template').to.equal(true);
    expect(instanceOf(m, labelled({ pool: 'a' }), false, NOW).id).to.equal('requested://m1');
    expect(instanceOf(m, labelled({ pool: 'a', tier: 'web' }), false, NOW)).to.deep.equal({
      id: 'virtual://z/m1',
      status: { instanceState: 'instanceRunning' },
    });
  });
  it('reports deleting for terminating and marked machines', () => {
    expect(
      instanceOf(machine('m1', { deleting: true }), node('p'), false, NOW).status.instanceState,
    ).to.equal('instanceDeleting');
    expect(instanceOf(machine('m1'), node('p'), true, NOW).status.instanceState).to.equal('instanceDeleting');
  });
  it('classes a ResourceExhausted creation as OutOfResources and any other failed creation as Other', () => {
    const exhausted = instanceOf(
      machine('m1', {
        phase: '',
        lastOp: { type: 'Create', state: 'Failed', errorCode: 'ResourceExhausted', description: 'zone full' },
      }),
      undefined,
      false,
      NOW,
    );
    expect(exhausted.status).to.deep.equal({
      instanceState: 'instanceCreating',
      errorInfo: { errorCode: 'ResourceExhausted', errorMessage: 'zone full', instanceErrorClass: 1 },
    });
    const other = instanceOf(
      machine('m2', { phase: 'Failed', lastOp: { type: 'Create', state: 'Failed', description: 'boom' } }),
      undefined,
      false,
      NOW,
    );
    expect(other.status.errorInfo?.instanceErrorClass).to.equal(99);
    expect(other.status.errorInfo?.errorCode).to.equal('MachineFailed');
  });
  it('reports a failed creation attempt that is being retried as Creating without error info', () => {
    // A transient failure (here: the new VM not visible to InitializeMachine yet) must not make the
    // autoscaler delete the machine and ask for another one.
    const retried = instanceOf(
      machine('m1', {
        phase: 'CrashLoopBackOff',
        lastOp: {
          type: 'Create',
          state: 'Failed',
          errorCode: 'NotFound',
          description: 'Provider error: no VM for machine default/m1. Initialize VM Instance',
        },
      }),
      undefined,
      false,
      NOW,
    );
    expect(retried.status).to.deep.equal({ instanceState: 'instanceCreating' });
  });
});

describe('autoscaler instances of machines gardener’s provider-side controller manages', () => {
  // Machines as gardener's Go machine controller writes them (a provider sidecar beside our
  // MachineSet and MachineDeployment controllers): Go structs serialised whole.
  const gardenerMachine = (
    name: string,
    status: Record<string, unknown>,
    extra: Partial<Machine> = {},
  ): Machine =>
    ({
      apiVersion: API_VERSION,
      kind: 'Machine',
      metadata: {
        name,
        namespace: NS,
        creationTimestamp: '2026-11-25T10:00:00Z',
        finalizers: ['machine.sapcloud.io/machine-controller-manager'],
        labels: { node: `ip-10-0-0-1.${name}` },
        ...extra.metadata,
      },
      spec: {
        class: { kind: 'MachineClass', name: 'aws' },
        nodeTemplate: { metadata: { creationTimestamp: null }, spec: {} },
        providerID: 'aws:///eu-west-1/i-0abc',
      },
      status,
    }) as unknown as Machine;

  it('a capacity failure of gardener’s AWS driver backs the group off as OutOfResources', () => {
    const m = gardenerMachine('m1', {
      currentStatus: {
        phase: 'CrashLoopBackOff',
        timeoutActive: true,
        lastUpdateTime: '2026-11-25T10:01:00Z',
      },
      lastOperation: {
        type: 'Create',
        state: 'Failed',
        errorCode: 'ResourceExhausted',
        description:
          'Cloud provider message - machine codes error: code = [ResourceExhausted] message = [InsufficientInstanceCapacity: no m5.large in eu-west-1a]',
        lastUpdateTime: '2026-11-25T10:01:00Z',
      },
    });
    const view = instanceOf(m, undefined, false, NOW);
    expect(view.id).to.equal('requested://m1');
    expect(view.status.instanceState).to.equal('instanceCreating');
    expect(view.status.errorInfo?.instanceErrorClass).to.equal(1);
    expect(view.status.errorInfo?.errorCode).to.equal('ResourceExhausted');
  });

  it('a machine still being created is Creating without an error, a joined one Running under its node’s providerID', () => {
    const pending = gardenerMachine('m2', {
      currentStatus: { phase: 'Pending', timeoutActive: true, lastUpdateTime: '2026-11-25T10:01:00Z' },
      lastOperation: {
        type: 'Create',
        state: 'Processing',
        description: 'Creating machine on cloud provider',
      },
    });
    expect(instanceOf(pending, undefined, false, NOW)).to.deep.equal({
      id: 'requested://m2',
      status: { instanceState: 'instanceCreating' },
    });
    // Its node registered (the kubelet's zone form of the id) before gardener's controller saw it join.
    expect(instanceOf(pending, node('aws:///eu-west-1a/i-0abc'), false, NOW)).to.deep.equal({
      id: 'requested://m2',
      status: { instanceState: 'instanceCreating' },
    });
    const running = gardenerMachine('m3', {
      currentStatus: { phase: 'Running', timeoutActive: false, lastUpdateTime: '2026-11-25T10:03:00Z' },
      lastOperation: {
        type: 'Create',
        state: 'Successful',
        description: 'Machine m3 successfully joined the cluster',
      },
    });
    expect(instanceOf(running, node('aws:///eu-west-1a/i-0abc'), false, NOW)).to.deep.equal({
      id: 'aws:///eu-west-1a/i-0abc',
      status: { instanceState: 'instanceRunning' },
    });
  });

  it('a machine gardener’s controller is deleting is Deleting', () => {
    const deleting = gardenerMachine(
      'm4',
      {
        currentStatus: { phase: 'Terminating', lastUpdateTime: '2026-11-25T10:05:00Z' },
        lastOperation: {
          type: 'Delete',
          state: 'Processing',
          description: 'Drain successful. Initiate VM deletion',
        },
      },
      { metadata: { deletionTimestamp: '2026-11-25T10:04:00Z' } },
    );
    expect(instanceOf(deleting, node('aws:///eu-west-1a/i-0abc'), false, NOW).status.instanceState).to.equal(
      'instanceDeleting',
    );
  });
});

describe('autoscaler scaling plans', () => {
  it('IncreaseSize: positive deltas up to max', () => {
    expect(planIncrease(group(), mcd('md', 2), 3)).to.deep.equal({ replicas: 5 });
    const over = planIncrease(group(), mcd('md', 3), 3);
    expect('error' in over && over.error.code).to.equal(status.FAILED_PRECONDITION);
    const zero = planIncrease(group(), mcd('md', 3), 0);
    expect('error' in zero && zero.error.code).to.equal(status.INVALID_ARGUMENT);
  });

  it('IncreaseSize: a deployment without spec.replicas has 0, so +1 asks for one machine, not two', () => {
    const unset = mcd('md', 0);
    delete unset.spec?.replicas;
    expect(replicasOf(unset), 'TargetSize').to.equal(0);
    expect(planIncrease(group(), unset, 1)).to.deep.equal({ replicas: 1 });
  });

  it('DeleteNodes: one decrement per new machine, trigger entries appended, repeats and failed machines not counted', () => {
    const d = mcd('md', 4, { [Annotation.TriggerDeletionByMCM]: `m0~2026-11-23T09:00:00Z` });
    const sets = [set('md-1', 4, d)];
    const going = new Set(['m0']);
    const r = planDeleteNodes({
      group: group(),
      mcd: d,
      sets,
      machines: [machine('m0'), machine('m2'), machine('m1'), machine('m3', { phase: 'Failed' })],
      going,
      now: NOW,
    });
    expect('plan' in r && r.plan).to.deep.equal({
      replicas: 2,
      trigger: 'm0~2026-11-23T09:00:00Z,m1~2026-11-23T10:00:00Z,m2~2026-11-23T10:00:00Z',
      marked: ['m1', 'm2'],
      already: ['m0', 'm3'],
    });
    const again = planDeleteNodes({
      group: group(),
      mcd: d,
      sets,
      machines: [machine('m0')],
      going,
      now: NOW,
    });
    expect('plan' in again && again.plan.replicas).to.equal(undefined);
  });

  it('DeleteNodes: a machine still named but whose mark no longer stands is marked anew, as the newest', () => {
    const d = mcd('md', 3, {
      [Annotation.TriggerDeletionByMCM]: 'm0~2026-11-23T09:00:00Z,m1~2026-11-23T09:01:00Z',
    });
    const r = planDeleteNodes({
      group: group(),
      mcd: d,
      sets: [set('md-1', 3, d)],
      machines: [machine('m0')],
      going: new Set(),
      now: NOW,
    });
    expect('plan' in r && r.plan).to.deep.equal({
      replicas: 2,
      trigger: 'm1~2026-11-23T09:01:00Z,m0~2026-11-23T10:00:00Z',
      marked: ['m0'],
      already: [],
    });
  });

  it('DeleteNodes: refused as a whole below min and during a rollout', () => {
    const d = mcd('md', 2);
    const below = planDeleteNodes({
      group: group({ min: 1 }),
      mcd: d,
      sets: [set('md-1', 2, d)],
      machines: [machine('a'), machine('b')],
      going: new Set(),
      now: NOW,
    });
    expect('error' in below && below.error.message).to.match(/min size 1/);
    const old = set('md-0', 1, mcd('md', 1, {}, 'old-class'));
    expect(rolloutInProgress(d, [old, set('md-1', 2, d)])).to.match(/rolling out.*md-0/);
    const rolling = planDeleteNodes({
      group: group({ min: 0 }),
      mcd: d,
      sets: [old, set('md-1', 2, d)],
      machines: [machine('a')],
      going: new Set(),
      now: NOW,
    });
    expect('error' in rolling && rolling.error.code).to.equal(status.FAILED_PRECONDITION);
    expect(
      rolloutInProgress(d, [set('md-0', 0, mcd('md', 1, {}, 'old-class')), set('md-1', 2, d)]),
      'old set at zero',
    ).to.equal(undefined);
  });

  it('DecreaseTargetSize: only unregistered machines, newest first, clamped at min', () => {
    const d = mcd('md', 5);
    const machines = [
      machine('r1'),
      machine('r2'),
      machine('p-old', { phase: 'Pending', created: '2026-11-23T09:00:00Z' }),
      machine('p-new', { phase: 'Pending', created: '2026-11-23T09:05:00Z' }),
      machine('p-mid', { phase: 'Pending', created: '2026-11-23T09:02:00Z' }),
    ];
    const registered = (m: Machine | { metadata: { name?: string } }): boolean =>
      (m.metadata.name ?? '').startsWith('r');
    const r = planDecrease({
      group: group({ min: 1 }),
      mcd: d,
      sets: [set('md-1', 5, d)],
      machines,
      registered,
      going: new Set(),
      delta: -2,
      now: NOW,
    });
    expect('plan' in r && r.plan.replicas).to.equal(3);
    expect('plan' in r && r.plan.marked).to.deep.equal(['p-mid', 'p-new']);
    const tooFar = planDecrease({
      group: group({ min: 0 }),
      mcd: d,
      sets: [],
      machines,
      registered,
      going: new Set(),
      delta: -4,
      now: NOW,
    });
    expect('error' in tooFar && tooFar.error.message).to.match(/2 registered/);
    const clamped = planDecrease({
      group: group({ min: 4 }),
      mcd: d,
      sets: [],
      machines,
      registered,
      going: new Set(),
      delta: -3,
      now: NOW,
    });
    expect('plan' in clamped && clamped.plan.replicas).to.equal(4);
    const positive = planDecrease({
      group: group(),
      mcd: d,
      sets: [],
      machines,
      registered,
      going: new Set(),
      delta: 1,
      now: NOW,
    });
    expect('error' in positive && positive.error.code).to.equal(status.INVALID_ARGUMENT);
  });
});

describe('autoscaler template node', () => {
  const cls: MachineClass = {
    metadata: { name: 'small', namespace: NS },
    providerSpec: {},
    nodeTemplate: {
      capacity: { cpu: '2', memory: '4Gi', 'nvidia.com/gpu': 1 },
      instanceType: 'v-small',
      region: 'r',
      zone: 'r-a',
      architecture: 'arm64',
    },
  };
  it('builds labels, capacity with pods, allocatable, taints and Ready from the class and the deployment', () => {
    const r = buildTemplateNode(`${NS}/md`, mcd('md', 1), cls);
    if (!('node' in r)) expect.fail(r.unavailable);
    const n = r.node;
    expect(n.status?.capacity).to.deep.equal({ cpu: '2', memory: '4Gi', 'nvidia.com/gpu': '1', pods: '110' });
    expect(n.status?.allocatable).to.deep.equal(n.status?.capacity);
    expect(n.metadata.labels?.pool).to.equal('md');
    expect(n.metadata.labels?.['kubernetes.io/arch']).to.equal('arm64');
    expect(n.metadata.labels?.['topology.kubernetes.io/zone']).to.equal('r-a');
    expect(n.spec?.taints).to.deep.equal([{ key: 'k', value: 'v', effect: 'NoSchedule' }]);
  });
  it('is unavailable without a class, without a nodeTemplate or with a bad quantity', () => {
    expect(buildTemplateNode('x', mcd('md', 1), undefined)).to.have.property('unavailable');
    expect(
      buildTemplateNode('x', mcd('md', 1), { ...cls, nodeTemplate: undefined } as unknown as MachineClass),
    ).to.have.property('unavailable');
    const bad = { ...cls, nodeTemplate: { ...cls.nodeTemplate, capacity: { cpu: 'two' } } } as MachineClass;
    expect(buildTemplateNode('x', mcd('md', 1), bad))
      .to.have.property('unavailable')
      .that.matches(/nodeTemplate\.capacity\.cpu: must be a resource quantity/);
  });
  it('offers nodeTemplate.allocatable to pods, and the full capacity of resources it does not name', () => {
    const reserved = {
      ...cls,
      nodeTemplate: {
        ...cls.nodeTemplate,
        capacity: { cpu: '2', memory: '4Gi', pods: 64 },
        virtualCapacity: { 'example.com/dongle': '2' },
        allocatable: { cpu: '1930m', memory: '3Gi', 'example.com/dongle': '1' },
      },
    } as MachineClass;
    const r = buildTemplateNode(`${NS}/md`, mcd('md', 1), reserved);
    if (!('node' in r)) expect.fail(r.unavailable);
    expect(r.node.status?.capacity).to.deep.equal({
      cpu: '2',
      memory: '4Gi',
      pods: '64',
      'example.com/dongle': '2',
    });
    expect(r.node.status?.allocatable).to.deep.equal({
      cpu: '1930m',
      memory: '3Gi',
      pods: '64',
      'example.com/dongle': '1',
    });
  });
  it('is unavailable when nodeTemplate.allocatable exceeds the capacity or names a resource the node lacks', () => {
    const withAllocatable = (allocatable: Record<string, string>): MachineClass =>
      ({ ...cls, nodeTemplate: { ...cls.nodeTemplate, allocatable } }) as MachineClass;
    expect(buildTemplateNode('x', mcd('md', 1), withAllocatable({ memory: '4097Mi' })))
      .to.have.property('unavailable')
      .that.matches(/nodeTemplate\.allocatable\.memory: must not exceed the capacity \(4Gi\)/);
    expect(buildTemplateNode('x', mcd('md', 1), withAllocatable({ 'example.com/none': '1' })))
      .to.have.property('unavailable')
      .that.matches(/nodeTemplate\.allocatable\.example\.com\/none: must name a resource/);
    expect(
      buildTemplateNode('x', mcd('md', 1), withAllocatable({ memory: '4Gi', pods: '110' })),
    ).to.have.property('node');
  });
  it('encodes to the Kubernetes protobuf field numbers (metadata=1 name=1, status=3 capacity=1)', () => {
    const r = buildTemplateNode(`${NS}/md`, mcd('md', 1), cls);
    if (!('node' in r)) expect.fail('no node');
    const bytes = encodeNode(r.node);
    // Node.metadata is field 1, length-delimited (tag 0x0a, then a varint length); ObjectMeta.name
    // is field 1 of ObjectMeta, tag 0x0a as well.
    expect(bytes[0]).to.equal(0x0a);
    let i = 1;
    while (((bytes[i] ?? 0) & 0x80) !== 0) i++;
    i++;
    expect(bytes[i]).to.equal(0x0a);
    const nameLen = bytes[i + 1] ?? 0;
    expect(bytes.subarray(i + 2, i + 2 + nameLen).toString()).to.equal('template-default-md');
    const back = decodeNode(bytes) as { status: { capacity: Record<string, { string: string }> } };
    expect(back.status.capacity.memory?.string).to.equal('4Gi');
  });
});

describe('gRPC flags', () => {
  const base = ['--namespace=default'];
  it('serves mutual TLS by default and needs the three files', () => {
    expect(() => parseArgs([...base, '--grpc-address=0.0.0.0:8086'])).to.throw(
      ConfigError,
      /--grpc-tls-cert-file.*--grpc-insecure/,
    );
    const c = parseArgs([
      ...base,
      '--grpc-address=0.0.0.0:8086',
      '--grpc-tls-cert-file=c',
      '--grpc-tls-key-file=k',
      '--grpc-client-ca-file=ca',
    ]);
    expect(c !== 'help' && c.grpcInsecure).to.equal(false);
  });
  it('rejects --grpc-insecure with TLS files, a bad address, --nodes elsewhere or without the server', () => {
    expect(() =>
      parseArgs([...base, '--grpc-address=127.0.0.1:8086', '--grpc-insecure', '--grpc-tls-cert-file=c']),
    ).to.throw(ConfigError, /contradicts/);
    expect(() => parseArgs([...base, '--grpc-address=8086', '--grpc-insecure'])).to.throw(
      ConfigError,
      /HOST:PORT/,
    );
    expect(() =>
      parseArgs([...base, '--grpc-address=127.0.0.1:8086', '--grpc-insecure', '--nodes=1:3:other.md']),
    ).to.throw(ConfigError, /not --namespace/);
    expect(() => parseArgs([...base, '--nodes=1:3:default.md'])).to.throw(
      ConfigError,
      /needs --grpc-address/,
    );
    expect(() =>
      parseArgs([
        ...base,
        '--grpc-address=127.0.0.1:8086',
        '--grpc-insecure',
        '--nodes=1:3:default.md',
        '--nodes=0:2:default.md',
      ]),
    ).to.throw(ConfigError, /twice/);
  });
  it('accepts repeatable --nodes', () => {
    const c = parseArgs([
      ...base,
      '--grpc-address=127.0.0.1:8086',
      '--grpc-insecure',
      '--nodes=1:3:default.a',
      '--nodes',
      '0:2:default.b',
    ]);
    expect(c !== 'help' && c.nodeGroups.map((g) => g.name)).to.deep.equal(['a', 'b']);
  });
  describe('--grpc-client-allowed-names', () => {
    const tls = [
      ...base,
      '--grpc-address=0.0.0.0:8086',
      '--grpc-tls-cert-file=c',
      '--grpc-tls-key-file=k',
      '--grpc-client-ca-file=ca',
    ];
    const names = (...args: string[]): string[] => {
      const c = parseArgs([...tls, ...args]);
      if (c === 'help') throw new Error('help');
      return c.grpcClientAllowedNames;
    };
    it('is empty by default (any certificate the client CA signed) and when given empty', () => {
      expect(names()).to.deep.equal([]);
      expect(names('--grpc-client-allowed-names=')).to.deep.equal([]);
    });
    it('takes comma-separated names, trimmed, duplicates dropped', () => {
      expect(
        names('--grpc-client-allowed-names= cluster-autoscaler, ca.kube-system.svc ,cluster-autoscaler'),
      ).to.deep.equal(['cluster-autoscaler', 'ca.kube-system.svc']);
      expect(names('--grpc-client-allowed-names', 'Cluster Autoscaler')).to.deep.equal([
        'Cluster Autoscaler',
      ]);
    });
    for (const [value, message] of [
      ['a,,b', /--grpc-client-allowed-names: empty name/],
      ['a,', /--grpc-client-allowed-names: empty name/],
      ['*.example.com', /--grpc-client-allowed-names: "\*\.example\.com" is a pattern/],
      ['ok,bad\u0007name', /--grpc-client-allowed-names: .* control character/],
    ] as const) {
      it(`rejects ${JSON.stringify(value)} naming the flag`, () => {
        expect(() => names(`--grpc-client-allowed-names=${value}`)).to.throw(ConfigError, message);
      });
    }
    it('is refused with --grpc-insecure (there is no client certificate to match)', () => {
      expect(() =>
        parseArgs([
          ...base,
          '--grpc-address=127.0.0.1:8086',
          '--grpc-insecure',
          '--grpc-client-allowed-names=cluster-autoscaler',
        ]),
      ).to.throw(ConfigError, /--grpc-client-allowed-names needs mutual TLS/);
    });
  });
});
