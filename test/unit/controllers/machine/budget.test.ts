import { expect } from 'chai';

import {
  API_VERSION,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineSet,
} from '../../../../lib/api/types.js';
import { ReplacementBudget } from '../../../../lib/controllers/machine/budget.js';
import { ControllerTestEnv } from '../env.js';

function machine(name: string, phase: string): Machine {
  return {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: {
      name,
      namespace: 'default',
      uid: `uid-${name}`,
      ownerReferences: [
        { apiVersion: API_VERSION, kind: 'MachineSet', name: 'ms', uid: 'uid-ms', controller: true },
      ],
    },
    spec: {},
    status: { currentStatus: { phase: phase as never } },
  };
}

async function env(phases: Record<string, string>, budget?: string): Promise<ControllerTestEnv> {
  const e = new ControllerTestEnv();
  const md: MachineDeployment = {
    apiVersion: API_VERSION,
    kind: 'MachineDeployment',
    metadata: {
      name: 'md',
      namespace: 'default',
      uid: 'uid-md',
      ...(budget === undefined ? {} : { annotations: { 'mcm-ts.io/max-unhealthy-replacements': budget } }),
    },
    spec: { replicas: 10, template: {} },
  };
  const ms: MachineSet = {
    apiVersion: API_VERSION,
    kind: 'MachineSet',
    metadata: {
      name: 'ms',
      namespace: 'default',
      uid: 'uid-ms',
      ownerReferences: [
        { apiVersion: API_VERSION, kind: 'MachineDeployment', name: 'md', uid: 'uid-md', controller: true },
      ],
    },
    spec: { replicas: 10 },
  };
  e.seed(MachineDeploymentResource, md);
  e.seed(MachineSetResource, ms);
  for (const [name, phase] of Object.entries(phases)) e.seed(MachineResource, machine(name, phase));
  await e.start();
  return e;
}

describe('replacement budget (meltdown protection)', () => {
  it('lets one of two concurrent unhealthy machines be marked with the default budget of 1', async () => {
    const e = await env({ a: 'Unknown', b: 'Unknown', c: 'Running' });
    const budget = new ReplacementBudget(
      e.informers.machines,
      e.informers.machineSets,
      e.informers.machineDeployments,
      '1',
    );
    const marked: string[] = [];
    const [ra, rb] = await Promise.all(
      ['a', 'b'].map((n) =>
        budget.tryMark(e.informers.machines.get('default', n) as never, e.clock.now(), () => {
          marked.push(n);
          return Promise.resolve();
        }),
      ),
    );
    expect(marked).to.have.length(1);
    expect([ra?.allowed, rb?.allowed].sort()).to.deep.equal([false, true]);
    await e.stop();
  });

  it('counts a Running machine it marked (its VM reported failed) until the cache shows it Failed, so a second one waits', async () => {
    // A zone's VMs reported failed: the machines are Running in the cache when they are marked.
    const e = await env({ a: 'Running', b: 'Running', c: 'Running' });
    const budget = new ReplacementBudget(
      e.informers.machines,
      e.informers.machineSets,
      e.informers.machineDeployments,
      '1',
    );
    const get = (n: string): never => e.informers.machines.get('default', n) as never;
    const ra = await budget.tryMark(get('a'), e.clock.now(), () => Promise.resolve());
    expect(ra.allowed, 'a').to.equal(true);
    // The cache still shows a Running: the mark counts.
    const rb = await budget.tryMark(get('b'), e.clock.now(), () => Promise.resolve());
    expect(rb).to.deep.equal({ allowed: false, inReplacement: 1, budget: 1 });
    // A mark the cache never shows (the write was undone) stops counting after a minute.
    const later = await budget.tryMark(get('b'), e.clock.now() + 61_000, () => Promise.resolve());
    expect(later.allowed, 'b a minute later').to.equal(true);
    await e.stop();
  });

  it('counts machines already being replaced, and honours a percentage annotation', async () => {
    const busy = await env({ a: 'Unknown', b: 'Pending', c: 'Running' });
    const budget = new ReplacementBudget(
      busy.informers.machines,
      busy.informers.machineSets,
      busy.informers.machineDeployments,
      '1',
    );
    const r = await budget.tryMark(
      busy.informers.machines.get('default', 'a') as never,
      busy.clock.now(),
      () => Promise.resolve(),
    );
    expect(r).to.deep.equal({ allowed: false, inReplacement: 1, budget: 1 });
    await busy.stop();

    const roomy = await env({ a: 'Unknown', b: 'Pending', c: 'Running' }, '20%');
    const budget2 = new ReplacementBudget(
      roomy.informers.machines,
      roomy.informers.machineSets,
      roomy.informers.machineDeployments,
      '1',
    );
    const r2 = await budget2.tryMark(
      roomy.informers.machines.get('default', 'a') as never,
      roomy.clock.now(),
      () => Promise.resolve(),
    );
    expect(r2).to.deep.equal({ allowed: true, inReplacement: 2, budget: 2 });
    await roomy.stop();
  });

  it('does not count an InPlaceUpdateFailed machine against itself, but counts it for others', async () => {
    const e = await env({ a: 'InPlaceUpdateFailed', b: 'Running', c: 'Unknown' });
    const budget = new ReplacementBudget(
      e.informers.machines,
      e.informers.machineSets,
      e.informers.machineDeployments,
      '1',
    );
    const own = await budget.tryMark(e.informers.machines.get('default', 'a') as never, e.clock.now(), () =>
      Promise.resolve(),
    );
    expect(own).to.deep.equal({ allowed: true, inReplacement: 1, budget: 1 });
    const other = await budget.tryMark(e.informers.machines.get('default', 'c') as never, e.clock.now(), () =>
      Promise.resolve(),
    );
    expect(other.allowed).to.be.false;
    await e.stop();
  });
});
