import { expect } from 'chai';

import type { Node } from '../../../../lib/kube/types.js';
import { planVmTransition } from '../../../../lib/providers/virtual/hypervisor.js';

function vmNode(annotations: Record<string, string>, ready: boolean, deleting = false): Node {
  return {
    metadata: {
      name: 'm',
      labels: { 'virtual.mcm-ts.io/vm': 'true' },
      annotations,
      ...(deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
    },
    status: { conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] },
  };
}

const at = (ms: number): string => new Date(ms).toISOString();
const KWOK = 'kwok.x-k8s.io/node';

describe('virtual provider: hypervisor planning', () => {
  const now = 1_000_000;
  const BOOTING_DUE = { 'virtual.mcm-ts.io/state': 'booting', 'virtual.mcm-ts.io/boot-at': at(now - 1) };
  const cases: [string, Node, ReturnType<typeof planVmTransition>][] = [
    [
      'a booting VM before its boot time waits until then',
      vmNode({ 'virtual.mcm-ts.io/state': 'booting', 'virtual.mcm-ts.io/boot-at': at(now + 5000) }, false),
      { kind: 'none', recheckAfterMs: 5000 },
    ],
    [
      'a booting VM at its boot time first starts its kubelet (kwok annotation), still NotReady and tainted',
      vmNode({ 'virtual.mcm-ts.io/state': 'booting', 'virtual.mcm-ts.io/boot-at': at(now) }, false),
      { kind: 'start-kubelet' },
    ],
    [
      'a booting VM whose kubelet runs turns Ready and accepts pods',
      vmNode({ ...BOOTING_DUE, [KWOK]: 'fake' }, false),
      { kind: 'boot' },
    ],
    [
      'a booting VM whose Ready write landed but not its state write boots again',
      vmNode({ ...BOOTING_DUE, [KWOK]: 'fake' }, true),
      { kind: 'boot' },
    ],
    [
      'a booting VM whose kwok annotation has another value starts its kubelet',
      vmNode({ ...BOOTING_DUE, [KWOK]: 'other' }, false),
      { kind: 'start-kubelet' },
    ],
    [
      'a VM whose boot never completes stays booting',
      vmNode(
        {
          'virtual.mcm-ts.io/state': 'booting',
          'virtual.mcm-ts.io/boot-at': at(now - 1),
          'virtual.mcm-ts.io/boot-never-completes': 'true',
        },
        false,
      ),
      { kind: 'none' },
    ],
    [
      'a running VM without failure mode is left alone',
      vmNode({ 'virtual.mcm-ts.io/state': 'running' }, true),
      { kind: 'none' },
    ],
    ['a node without a state annotation counts as running', vmNode({}, true), { kind: 'none' }],
    [
      'a running VM waits for its not-ready time',
      vmNode(
        { 'virtual.mcm-ts.io/state': 'running', 'virtual.mcm-ts.io/not-ready-at': at(now + 2000) },
        true,
      ),
      { kind: 'none', recheckAfterMs: 2000 },
    ],
    [
      'a running VM past its not-ready time stops',
      vmNode({ 'virtual.mcm-ts.io/state': 'running', 'virtual.mcm-ts.io/not-ready-at': at(now) }, true),
      { kind: 'stop' },
    ],
    [
      'a stopped VM still Ready is marked NotReady',
      vmNode({ 'virtual.mcm-ts.io/state': 'stopped' }, true),
      { kind: 'mark-not-ready' },
    ],
    [
      'a stopped VM NotReady is left alone',
      vmNode({ 'virtual.mcm-ts.io/state': 'stopped' }, false),
      { kind: 'none' },
    ],
    [
      'a terminating VM is left alone',
      vmNode({ 'virtual.mcm-ts.io/state': 'booting' }, false, true),
      { kind: 'none' },
    ],
  ];
  for (const [name, node, want] of cases) {
    it(name, () => {
      expect(planVmTransition(node, now)).to.deep.equal(want);
    });
  }

  it('ignores nodes that are not virtual VMs', () => {
    const node: Node = { metadata: { name: 'real', annotations: { 'virtual.mcm-ts.io/state': 'booting' } } };
    expect(planVmTransition(node, now)).to.deep.equal({ kind: 'none' });
  });
});
