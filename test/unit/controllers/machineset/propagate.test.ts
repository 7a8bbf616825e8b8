import { expect } from 'chai';

import { planAutoPreservation, propagationPatch } from '../../../../lib/controllers/machineset/propagate.js';
import { machine, machineSet } from '../builders.js';

describe('MachineSet propagation of the node template to its machines', () => {
  it('treats the empty template gardener’s provider writes back as no template at all', () => {
    const ms = machineSet('pool', 1);
    delete ms.spec?.template?.spec?.nodeTemplate;
    const m = machine('pool-a', { owner: ms });
    // What gardener's Go machine controller sends when it updates a machine without a template:
    // a struct that cannot be omitted, with a null timestamp.
    if (m.spec !== undefined)
      m.spec.nodeTemplate = { metadata: { creationTimestamp: null }, spec: {} } as never;
    expect(propagationPatch(ms, m)).to.equal(undefined);
  });

  it('still writes a template whose content differs', () => {
    const ms = machineSet('pool', 1);
    const m = machine('pool-a', { owner: ms });
    if (m.spec !== undefined)
      m.spec.nodeTemplate = {
        metadata: { creationTimestamp: null, labels: { role: 'old' } },
        spec: {},
      } as never;
    expect(propagationPatch(ms, m)).to.deep.equal({
      spec: { nodeTemplate: { metadata: { labels: { role: 'worker' } } } },
    });
  });

  it('removes a template the set no longer has', () => {
    const ms = machineSet('pool', 1);
    const m = machine('pool-a', { owner: ms });
    delete ms.spec?.template?.spec?.nodeTemplate;
    expect(propagationPatch(ms, m)).to.deep.equal({ spec: { nodeTemplate: null } });
  });
});

describe('auto-preservation of failed machines (planAutoPreservation)', () => {
  const PRESERVE = 'node.machine.sapcloud.io/preserve';
  const set = (max: number) => {
    const ms = machineSet('pool', 3);
    if (ms.spec !== undefined) ms.spec.autoPreserveFailedMachineMax = max;
    return ms;
  };
  const failed = (name: string, created: string, preserve?: string) =>
    machine(name, {
      phase: 'Failed',
      created,
      ...(preserve === undefined ? {} : { annotations: { [PRESERVE]: preserve } }),
    });
  const names = (ms: { metadata: { name?: string } }[]) => ms.map((m) => m.metadata.name);

  it('preserves the newest failed machines up to the limit, never one a user asked about', () => {
    const machines = [
      failed('old', '2026-11-21T09:00:00Z'),
      failed('new', '2026-11-21T09:05:00Z'),
      failed('users', '2026-11-21T09:10:00Z', 'false'),
      machine('fine'),
    ];
    expect(names(planAutoPreservation(set(1), machines).preserve)).to.deep.equal(['new']);
    expect(names(planAutoPreservation(set(5), machines).preserve)).to.deep.equal(['new', 'old']);
  });

  it('releases the oldest auto-preserved machines above a lowered limit', () => {
    const machines = [
      failed('a', '2026-11-21T09:00:00Z', 'auto-preserved'),
      failed('b', '2026-11-21T09:05:00Z', 'auto-preserved'),
    ];
    const plan = planAutoPreservation(set(1), machines);
    expect(names(plan.unpreserve)).to.deep.equal(['a']);
    expect(plan.preserve).to.deep.equal([]);
  });

  it('preserves no new machine while the deployment rolls (gardener #1137), and keeps those preserved', () => {
    const machines = [
      failed('kept', '2026-11-21T09:00:00Z', 'auto-preserved'),
      failed('fresh', '2026-11-21T09:05:00Z'),
    ];
    expect(names(planAutoPreservation(set(2), machines).preserve), 'not rolling').to.deep.equal(['fresh']);
    const rolling = planAutoPreservation(set(2), machines, { rolling: true });
    expect(rolling.preserve, 'rolling').to.deep.equal([]);
    expect(rolling.unpreserve).to.deep.equal([]);
  });
});
