import { expect } from 'chai';

import { MachineResource } from '../../../../lib/api/types.js';
import {
  UnmanagedNodeController,
  claimingMachines,
  planUnmanagedNode,
} from '../../../../lib/controllers/safety/nodes.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import type { Node } from '../../../../lib/kube/types.js';
import { nullLogger } from '../../../../lib/observability/logger.js';
import { machine } from '../builders.js';
import { ControllerTestEnv } from '../env.js';

const rctx = { log: nullLogger, signal: new AbortController().signal };
const ANNOTATION = 'node.machine.sapcloud.io/not-managed-by-mcm';
const FINALIZER = 'node.machine.sapcloud.io/machine-controller';
const NOW = Date.UTC(2026, 10, 21, 10, 0, 0);
const TIMEOUT = 20 * 60_000;

function node(
  name: string,
  opts: {
    ageMs?: number;
    annotated?: boolean;
    finalizer?: boolean;
    machineName?: string;
    deleting?: boolean;
  } = {},
): Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      creationTimestamp: new Date(NOW - (opts.ageMs ?? TIMEOUT + 1000))
        .toISOString()
        .replace(/\.\d{3}Z$/, 'Z'),
      ...(opts.annotated === true ? { annotations: { [ANNOTATION]: '1' } } : {}),
      ...(opts.finalizer === true ? { finalizers: [FINALIZER] } : {}),
      ...(opts.machineName === undefined
        ? {}
        : { labels: { 'node.gardener.cloud/machine-name': opts.machineName } }),
      ...(opts.deleting === true ? { deletionTimestamp: '2026-11-21T09:59:00Z' } : {}),
    },
  };
}

describe('planUnmanagedNode', () => {
  const cases: [
    string,
    Node,
    number,
    { annotate?: boolean; removeFinalizer: boolean; recheckAfterMs?: number },
  ][] = [
    ['old node without machine: annotate', node('n'), 0, { annotate: true, removeFinalizer: false }],
    ['already annotated: nothing to write', node('n', { annotated: true }), 0, { removeFinalizer: false }],
    [
      'without machine but carrying our finalizer: annotate and drop the finalizer',
      node('n', { finalizer: true }),
      0,
      { annotate: true, removeFinalizer: true },
    ],
    [
      'younger than the creation timeout: look again when it is old enough',
      node('n', { ageMs: 60_000 }),
      0,
      { removeFinalizer: false, recheckAfterMs: TIMEOUT - 60_000 },
    ],
    [
      'claimed and annotated: remove the annotation',
      node('n', { annotated: true }),
      1,
      { annotate: false, removeFinalizer: false },
    ],
    ['claimed, not annotated: nothing', node('n'), 1, { removeFinalizer: false }],
    [
      'being deleted without machine: not annotated',
      node('n', { deleting: true }),
      0,
      { removeFinalizer: false },
    ],
    [
      'being deleted without machine but with our finalizer: the finalizer goes, or nothing would release the node',
      node('n', { deleting: true, finalizer: true }),
      0,
      { removeFinalizer: true },
    ],
  ];
  for (const [name, n, claimed, want] of cases) {
    it(name, () => {
      expect(planUnmanagedNode(n, claimed, NOW, TIMEOUT)).to.deep.equal(want);
    });
  }
});

describe('claimingMachines', () => {
  it('counts machines by their node label and the machine named by the node, unless that one names another node', () => {
    const byLabel = [machine('a', { labels: { node: 'n' } })];
    const named = machine('b', { labels: {} });
    const elsewhere = machine('c', { labels: { node: 'other' } });
    const lookup = (n: string): ReturnType<typeof machine> | undefined =>
      ({ b: named, c: elsewhere })[n as 'b' | 'c'];
    expect(
      claimingMachines(node('n', { machineName: 'b' }), byLabel, lookup).map((m) => m.metadata.name),
    ).to.deep.equal(['a', 'b']);
    expect(claimingMachines(node('n', { machineName: 'c' }), [], lookup)).to.have.length(0);
    expect(claimingMachines(node('n', { machineName: 'a' }), byLabel, lookup)).to.have.length(1);
  });
});

describe('UnmanagedNodeController (in-memory API)', () => {
  let env: ControllerTestEnv;
  let c: UnmanagedNodeController;

  beforeEach(async () => {
    env = new ControllerTestEnv();
    env.seed(
      CoreResources.nodes,
      node('lonely'),
      node('young', { ageMs: 1000 }),
      node('claimed', { annotated: true }),
    );
    env.seed(MachineResource, machine('m', { labels: { node: 'claimed' } }));
    c = new UnmanagedNodeController(env.ctx, { creationTimeoutMs: TIMEOUT, periodMs: 60_000 });
    await env.start();
    env.target.clearActions();
  });

  afterEach(async () => {
    await env.stop();
  });

  const annotation = (name: string): string | undefined =>
    env.target.peek<Node>(CoreResources.nodes, name)?.metadata.annotations?.[ANNOTATION];

  it('annotates a node without machine once, removes the annotation of a claimed node, and leaves young nodes', async () => {
    expect(env.clock.now()).to.equal(NOW);
    await c.reconcile('lonely', rctx);
    await c.reconcile('claimed', rctx);
    const young = await c.reconcile('young', rctx);
    expect(annotation('lonely')).to.equal('1');
    expect(annotation('claimed')).to.equal(undefined);
    expect(annotation('young')).to.equal(undefined);
    expect(young.requeueAfter).to.equal(TIMEOUT - 1000);
    expect(env.target.writes().map((w) => [w.verb, w.name])).to.deep.equal([
      ['patch', 'lonely'],
      ['patch', 'claimed'],
    ]);
    await env.settle();
    env.target.clearActions();
    await c.reconcile('lonely', rctx);
    await c.reconcile('claimed', rctx);
    expect(env.target.writes(), 'no patch when nothing changes').to.have.length(0);
  });

  it('a machine claiming an annotated node removes the annotation', async () => {
    await c.reconcile('lonely', rctx);
    await env.settle();
    await env.api.create(MachineResource, machine('new', { labels: { node: 'lonely' } }));
    await env.settle();
    await c.reconcile('lonely', rctx);
    expect(annotation('lonely')).to.equal(undefined);
  });
});
