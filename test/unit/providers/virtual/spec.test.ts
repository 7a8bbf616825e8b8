import { expect } from 'chai';

import { buildTemplateNode } from '../../../../lib/autoscaler/template.js';
import { parseProviderSpec, vmShapeOf } from '../../../../lib/providers/virtual/spec.js';
import {
  buildVmNode,
  internalIPOf,
  providerIDOf,
  vmNameOfProviderID,
} from '../../../../lib/providers/virtual/vm.js';

describe('virtual provider: providerSpec', () => {
  it('gives the defaults for an empty spec: no boot delay, no latency, no errors, unlimited capacity', () => {
    const r = parseProviderSpec({});
    expect(r).to.deep.equal({
      ok: true,
      spec: {
        bootDelayMs: 0,
        apiLatencyMs: 0,
        errorRate: 0,
        zoneCapacity: {},
        failure: { bootNeverCompletes: false, notReadyAfterMs: undefined },
        inPlaceUpdate: { durationMs: 5000, fail: false, failureReason: 'simulated in-place update failure' },
        pricePerHour: undefined,
      },
    });
  });

  it('parses every option', () => {
    const r = parseProviderSpec({
      bootDelay: '30s',
      apiLatency: '250ms',
      errorRate: 0.3,
      zoneCapacity: { 'zone-a': 10, 'zone-b': 0 },
      failure: { bootNeverCompletes: true, notReadyAfter: '5m' },
      inPlaceUpdate: { duration: '2s', fail: true, failureReason: 'kernel panic' },
      pricePerHour: 0.5,
    });
    expect(r.ok).to.be.true;
    if (!r.ok) return;
    expect(r.spec).to.deep.equal({
      bootDelayMs: 30_000,
      apiLatencyMs: 250,
      errorRate: 0.3,
      zoneCapacity: { 'zone-a': 10, 'zone-b': 0 },
      failure: { bootNeverCompletes: true, notReadyAfterMs: 300_000 },
      inPlaceUpdate: { durationMs: 2000, fail: true, failureReason: 'kernel panic' },
      pricePerHour: 0.5,
    });
  });

  const bad: [string, unknown, RegExp][] = [
    ['a non-object spec', 'fast', /providerSpec: must be an object/],
    ['an unknown option', { bootdelay: '1s' }, /providerSpec\.bootdelay: unknown option \(known: bootDelay/],
    ['a malformed duration', { bootDelay: 'soon' }, /providerSpec\.bootDelay: must be a duration/],
    ['a number for a duration', { apiLatency: 5 }, /providerSpec\.apiLatency: must be a duration string/],
    ['a negative duration', { bootDelay: '-1s' }, /must not be negative/],
    ['an error rate above 1', { errorRate: 1.5 }, /providerSpec\.errorRate: must be a number from 0 to 1/],
    [
      'a fractional capacity',
      { zoneCapacity: { a: 1.5 } },
      /providerSpec\.zoneCapacity\.a: must be a whole number/,
    ],
    ['a capacity list', { zoneCapacity: [1] }, /providerSpec\.zoneCapacity: must map zone names/],
    ['an unknown failure mode', { failure: { crash: true } }, /providerSpec\.failure\.crash: unknown option/],
    [
      'a non-boolean failure flag',
      { failure: { bootNeverCompletes: 'yes' } },
      /bootNeverCompletes: must be true or false/,
    ],
    ['a negative price', { pricePerHour: -1 }, /providerSpec\.pricePerHour: must be a number >= 0/],
    ['a price as text', { pricePerHour: '1' }, /providerSpec\.pricePerHour: must be a number >= 0/],
    ['a non-object inPlaceUpdate', { inPlaceUpdate: '5s' }, /providerSpec\.inPlaceUpdate: must be an object/],
    [
      'an unknown inPlaceUpdate option',
      { inPlaceUpdate: { durationn: '5s' } },
      /providerSpec\.inPlaceUpdate\.durationn: unknown option \(known: duration, fail, failureReason\)/,
    ],
    [
      'a malformed inPlaceUpdate duration',
      { inPlaceUpdate: { duration: 'later' } },
      /providerSpec\.inPlaceUpdate\.duration: must be a duration/,
    ],
    [
      'a non-boolean inPlaceUpdate.fail',
      { inPlaceUpdate: { fail: 'yes' } },
      /inPlaceUpdate\.fail: must be true or false/,
    ],
    [
      'an empty inPlaceUpdate.failureReason',
      { inPlaceUpdate: { failureReason: ' ' } },
      /inPlaceUpdate\.failureReason: must be a non-empty string/,
    ],
  ];
  for (const [name, spec, message] of bad) {
    it(`rejects ${name} with a message naming the option`, () => {
      const r = parseProviderSpec(spec);
      expect(r.ok).to.be.false;
      if (r.ok) return;
      expect(r.problems.join('; ')).to.match(message);
    });
  }

  it('reports every problem, not only the first', () => {
    const r = parseProviderSpec({ bootDelay: 'x', errorRate: -1, colour: 'blue' });
    expect(r.ok).to.be.false;
    if (!r.ok) expect(r.problems).to.have.length(3);
  });
});

describe('virtual provider: VM shape and Node', () => {
  const cls = (nodeTemplate?: object): never =>
    ({
      metadata: { name: 'c' },
      providerSpec: {},
      ...(nodeTemplate === undefined ? {} : { nodeTemplate }),
    }) as never;

  it('takes the shape from the class’s nodeTemplate, adding 110 pods when absent', () => {
    const shape = vmShapeOf(
      cls({
        capacity: { cpu: 4, memory: '16Gi' },
        instanceType: 'm5',
        region: 'r',
        zone: 'z',
        architecture: 'arm64',
      }),
    );
    expect(shape).to.deep.equal({
      instanceType: 'm5',
      region: 'r',
      zone: 'z',
      architecture: 'arm64',
      capacity: { cpu: '4', memory: '16Gi', pods: '110' },
      allocatable: { cpu: '4', memory: '16Gi', pods: '110' },
    });
  });

  it('gives the Node the allocatable the autoscaler’s template node has', () => {
    const machineClass = cls({
      capacity: { cpu: '4', memory: '16Gi' },
      allocatable: { cpu: '3920m', memory: '14Gi' },
      virtualCapacity: { 'example.com/dongle': '1' },
      instanceType: 'm5',
      region: 'r',
      zone: 'z',
    });
    const node = buildVmNode(
      {
        name: 'm',
        machine: 'ns/m',
        machineClass: 'c',
        shape: vmShapeOf(machineClass),
        bootAt: 0,
        notReadyAt: undefined,
        bootNeverCompletes: false,
      },
      1000,
    );
    expect(node.status?.capacity).to.deep.equal({ cpu: '4', memory: '16Gi', pods: '110' });
    expect(node.status?.allocatable).to.deep.equal({ cpu: '3920m', memory: '14Gi', pods: '110' });
    const template = buildTemplateNode('ns/md', { spec: { template: {} } } as never, machineClass);
    if (!('node' in template)) expect.fail(template.unavailable);
    for (const r of ['cpu', 'memory', 'pods'])
      expect(node.status?.allocatable?.[r], r).to.equal(template.node.status?.allocatable?.[r]);
  });

  it('keeps an explicit pods capacity', () => {
    expect(
      vmShapeOf(cls({ capacity: { pods: '30' }, instanceType: 'i', region: 'r', zone: 'z' })).capacity.pods,
    ).to.equal('30');
  });

  it('uses defaults without a nodeTemplate', () => {
    const shape = vmShapeOf(cls());
    expect(shape.zone).to.equal('virtual-zone-a');
    expect(shape.capacity.pods).to.equal('110');
  });

  it('round-trips providerIDs and gives stable private addresses', () => {
    expect(providerIDOf('z1', 'm-1')).to.equal('virtual://z1/m-1');
    expect(vmNameOfProviderID('virtual://z1/m-1')).to.equal('m-1');
    expect(vmNameOfProviderID('aws:///eu/i-123')).to.equal(undefined);
    expect(internalIPOf('m-1')).to.equal(internalIPOf('m-1'));
    expect(internalIPOf('m-1')).to.match(/^10\.\d+\.\d+\.\d+$/);
  });

  it('registers a Ready node with the well-known labels when the VM boots at once', () => {
    const shape = vmShapeOf(cls({ capacity: { cpu: '2' }, instanceType: 'small', region: 'r', zone: 'z' }));
    const node = buildVmNode(
      {
        name: 'm',
        machine: 'ns/m',
        machineClass: 'c',
        shape,
        bootAt: 1000,
        notReadyAt: undefined,
        bootNeverCompletes: false,
      },
      1000,
    );
    expect(node.spec?.providerID).to.equal('virtual://z/m');
    expect(node.spec?.taints).to.equal(undefined);
    expect(node.metadata.labels).to.include({
      'kubernetes.io/hostname': 'm',
      'node.kubernetes.io/instance-type': 'small',
      'topology.kubernetes.io/region': 'r',
      'topology.kubernetes.io/zone': 'z',
      'kubernetes.io/arch': 'amd64',
      'kubernetes.io/os': 'linux',
      'virtual.mcm-ts.io/vm': 'true',
    });
    expect(node.metadata.annotations?.['kwok.x-k8s.io/node']).to.equal('fake');
    expect(node.status?.conditions?.[0]).to.include({ type: 'Ready', status: 'True' });
    expect(node.status?.allocatable).to.deep.equal({ cpu: '2', pods: '110' });
  });

  it('registers the node with its machine template’s labels and taints, as a kubelet with --node-labels does', () => {
    const shape = vmShapeOf(cls({ instanceType: 'small', region: 'r', zone: 'z' }));
    const vm = {
      name: 'm',
      machine: 'ns/m',
      machineClass: 'c',
      shape,
      notReadyAt: undefined,
      bootNeverCompletes: false,
      nodeLabels: { pool: 'gpu', 'node.kubernetes.io/instance-type': 'forged' },
      nodeTaints: [{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' as const }],
    };
    const ready = buildVmNode({ ...vm, bootAt: 0 }, 1000);
    expect(ready.metadata.labels).to.include({ pool: 'gpu', 'node.kubernetes.io/instance-type': 'small' });
    expect(ready.spec?.taints).to.deep.equal([{ key: 'dedicated', value: 'gpu', effect: 'NoSchedule' }]);
    const booting = buildVmNode({ ...vm, bootAt: 5000 }, 1000);
    expect(booting.spec?.taints?.map((t) => t.key)).to.deep.equal([
      'node.kubernetes.io/not-ready',
      'dedicated',
    ]);
  });

  it('registers a booting node NotReady, tainted and without kwok until its boot time', () => {
    const shape = vmShapeOf(cls());
    const node = buildVmNode(
      {
        name: 'm',
        machine: 'ns/m',
        machineClass: 'c',
        shape,
        bootAt: 5000,
        notReadyAt: undefined,
        bootNeverCompletes: false,
      },
      1000,
    );
    expect(node.metadata.annotations?.['kwok.x-k8s.io/node']).to.equal(undefined);
    expect(node.metadata.annotations?.['virtual.mcm-ts.io/state']).to.equal('booting');
    expect(node.spec?.taints).to.deep.equal([{ key: 'node.kubernetes.io/not-ready', effect: 'NoSchedule' }]);
    expect(node.status?.conditions?.[0]).to.include({ type: 'Ready', status: 'False' });
  });
});
