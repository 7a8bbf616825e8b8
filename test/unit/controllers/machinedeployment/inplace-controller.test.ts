import { expect } from 'chai';

import type { Node } from '../../../../lib/kube/types.js';
import {
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
  type MachineSet,
} from '../../../../lib/api/types.js';
import { MachineDeploymentController } from '../../../../lib/controllers/machinedeployment/controller.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import { nullLogger } from '../../../../lib/observability/logger.js';
import { ControllerTestEnv } from '../env.js';
import { deployment, machineOf, node, NS, ownedSet, withClass } from './fixtures.js';

const rctx = { log: nullLogger, signal: new AbortController().signal };
const CANDIDATE = 'node.machine.sapcloud.io/candidate-for-update';
const SELECTED = 'node.machine.sapcloud.io/selected-for-update';
const RESULT = 'node.machine.sapcloud.io/update-result';

describe('MachineDeploymentController, InPlaceUpdate (in-memory API)', () => {
  let env: ControllerTestEnv;
  let controller: MachineDeploymentController;

  afterEach(async () => {
    await env.stop();
  });

  const v1 = deployment('d', 2, {
    strategy: {
      type: 'InPlaceUpdate',
      inPlaceUpdate: { maxSurge: 0, maxUnavailable: 1, orchestrationType: 'Auto' },
    },
  });

  async function setup(mcd: MachineDeployment): Promise<MachineSet> {
    env = new ControllerTestEnv({}, { withTarget: true });
    const old = ownedSet(v1, 2, { revision: 1 });
    env.seed(MachineDeploymentResource, mcd);
    env.seed(MachineSetResource, old);
    for (const i of [0, 1]) {
      env.seed(MachineResource, machineOf(old, `m-${i}`, { node: `n-${i}` }));
      env.seed(CoreResources.nodes, node(`n-${i}`));
    }
    controller = new MachineDeploymentController(env.ctx);
    await env.start();
    return old;
  }

  async function reconcile(): Promise<void> {
    await controller.reconcile(`${NS}/d`, rctx);
    await env.settle();
  }

  const sets = (): MachineSet[] => env.api.all<MachineSet>(MachineSetResource, NS);
  const setOfClass = (name: string): MachineSet | undefined =>
    sets().find((s) => s.spec?.template?.spec?.class?.name === name);
  const nodeOf = (name: string): Node | undefined => env.target.peek<Node>(CoreResources.nodes, name);
  const machine = (name: string): Machine | undefined => env.api.peek<Machine>(MachineResource, name, NS);

  /** What the node's update agent and the machine controller do when an update succeeds. */
  async function updateSucceeds(i: number): Promise<void> {
    const n = nodeOf(`n-${i}`) as Node;
    n.metadata.labels = { ...(n.metadata.labels ?? {}), [RESULT]: 'successful' };
    n.spec = { ...(n.spec ?? {}), unschedulable: true };
    await env.target.update(CoreResources.nodes, n);
    const cond = { type: 'InPlaceUpdate', status: 'True' as const, reason: 'UpdateSuccessful' };
    await env.target.updateStatus(CoreResources.nodes, {
      ...(nodeOf(`n-${i}`) as Node),
      status: { conditions: [cond] },
    });
    const m = machine(`m-${i}`) as Machine;
    await env.api.updateStatus(MachineResource, {
      ...m,
      status: { currentStatus: { phase: 'InPlaceUpdateSuccessful' }, conditions: [cond] },
    });
    await env.settle();
  }

  it('updates machines one at a time in place and hands each over to the new set', async () => {
    const old = await setup(withClass(v1, 'large'));
    await reconcile();
    const newSet = setOfClass('large');
    expect(newSet?.spec?.replicas, 'no surge: the new set starts empty').to.equal(0);
    expect(setOfClass('small')?.metadata.labels?.['node.machine.sapcloud.io/scale-up-disabled']).to.equal(
      'true',
    );
    expect([0, 1].map((i) => nodeOf(`n-${i}`)?.metadata.labels?.[CANDIDATE])).to.deep.equal(['true', 'true']);

    await reconcile();
    expect([0, 1].map((i) => nodeOf(`n-${i}`)?.metadata.labels?.[SELECTED])).to.deep.equal([
      'true',
      undefined,
    ]);
    await reconcile();
    expect(nodeOf('n-1')?.metadata.labels?.[SELECTED], 'maxUnavailable 1: one node at a time').to.equal(
      undefined,
    );

    await updateSucceeds(0);
    await reconcile();
    const moved = machine('m-0');
    expect(moved?.metadata.ownerReferences?.find((r) => r.controller === true)?.uid).to.equal(
      newSet?.metadata.uid,
    );
    expect(moved?.metadata.labels?.['machine-template-hash']).to.equal(
      newSet?.spec?.selector?.matchLabels?.['machine-template-hash'],
    );
    expect(moved?.metadata.uid, 'the same machine').to.equal('uid-m-0');
    expect(moved?.spec?.class?.name, 'it runs the new class now').to.equal('large');
    expect(moved?.metadata.labels?.[RESULT]).to.equal('successful');
    expect(setOfClass('small')?.spec?.replicas).to.equal(1);
    expect(setOfClass('large')?.spec?.replicas).to.equal(1);
    expect(nodeOf('n-0')?.spec?.unschedulable ?? false, 'uncordoned').to.equal(false);
    expect(env.recorder.events.map((e) => e.reason)).to.include('UpdatedInPlace');

    await reconcile();
    expect(machine('m-0')?.metadata.labels?.[RESULT], 'counted by the new set: label dropped').to.equal(
      undefined,
    );
    expect(nodeOf('n-0')?.metadata.labels ?? {}).to.not.have.any.keys(CANDIDATE, SELECTED, RESULT);
    expect(nodeOf('n-1')?.metadata.labels?.[SELECTED], 'm-0 is not Running yet').to.equal(undefined);

    const m0 = machine('m-0') as Machine;
    await env.api.updateStatus(MachineResource, { ...m0, status: { currentStatus: { phase: 'Running' } } });
    await env.settle();
    await reconcile();
    expect(nodeOf('n-1')?.metadata.labels?.[SELECTED]).to.equal('true');
    expect(old.metadata.name).to.equal(setOfClass('small')?.metadata.name);
  });

  it('Manual orchestration creates the new set empty and selects nothing', async () => {
    const manual = withClass(v1, 'large');
    if (manual.spec?.strategy?.inPlaceUpdate !== undefined)
      manual.spec.strategy.inPlaceUpdate = { maxSurge: 1, maxUnavailable: 1, orchestrationType: 'Manual' };
    await setup(manual);
    await reconcile();
    await reconcile();
    expect(setOfClass('large')?.spec?.replicas).to.equal(0);
    expect([0, 1].map((i) => nodeOf(`n-${i}`)?.metadata.labels?.[CANDIDATE])).to.deep.equal(['true', 'true']);
    expect([0, 1].map((i) => nodeOf(`n-${i}`)?.metadata.labels?.[SELECTED])).to.deep.equal([
      undefined,
      undefined,
    ]);
  });

  it('Auto orchestration with maxSurge adds fresh machines to the new set first', async () => {
    const surge = withClass(v1, 'large');
    if (surge.spec?.strategy?.inPlaceUpdate !== undefined) surge.spec.strategy.inPlaceUpdate.maxSurge = 1;
    await setup(surge);
    await reconcile();
    expect(setOfClass('large')?.spec?.replicas).to.equal(1);
    expect(setOfClass('large')?.metadata.annotations?.['deployment.kubernetes.io/max-replicas']).to.equal(
      '3',
    );
  });
});
