import { expect } from 'chai';

import { Label } from '../../../lib/api/constants.js';
import { MachineResource, type Machine } from '../../../lib/api/types.js';
import { NodeController } from '../../../lib/controllers/node/controller.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import type { Node } from '../../../lib/kube/types.js';
import { nullLogger } from '../../../lib/observability/logger.js';
import { machine } from './builders.js';
import { ControllerTestEnv } from './env.js';

const rctx = { log: nullLogger, signal: new AbortController().signal };
const NODE = 'ip-10-250-0-4.eu-west-1.compute.internal';

/** A machine whose VM `instance` was (or will be) registered as the Node named NODE. */
function machineOn(name: string, instance: string, phase: string): Machine {
  const m = machine(name, { phase, labels: { [Label.Node]: NODE } });
  if (m.spec !== undefined) m.spec.providerID = `aws:///eu-west-1/${instance}`;
  return m;
}

function nodeOf(instance: string, machineName: string | undefined): Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: NODE,
      uid: `node-${instance}`,
      labels: machineName === undefined ? {} : { [Label.NodeMachineName]: machineName },
    },
    spec: { providerID: `aws:///eu-west-1a/${instance}` },
  };
}

async function withController(
  machines: Machine[],
  node: Node,
  body: (env: ControllerTestEnv, nc: NodeController) => Promise<void>,
): Promise<void> {
  const env = new ControllerTestEnv();
  env.seed(MachineResource, ...machines);
  env.seed(CoreResources.nodes, node);
  const nc = new NodeController(env.ctx);
  await env.start();
  try {
    await body(env, nc);
  } finally {
    await env.stop();
  }
}

const alive = (env: ControllerTestEnv, name: string): boolean =>
  env.api
    .all<Machine>(MachineResource)
    .some((m) => m.metadata.name === name && m.metadata.deletionTimestamp === undefined);

describe('node controller: a deleted Node takes only its own machine along', () => {
  it('deletes the machine a deleted node is labelled for', async () => {
    await withController([machineOn('m1', 'i-old', 'Running')], nodeOf('i-old', 'm1'), async (env, nc) => {
      await env.target.delete(CoreResources.nodes, NODE);
      await env.settle();
      await nc.reconcile(NODE, rctx);
      expect(alive(env, 'm1'), 'm1 deleted').to.equal(false);
      expect(env.recorder.events.map((e) => e.reason)).to.include('NodeDeleted');
    });
  });

  it('deletes the machine whose VM an unlabelled deleted node is (its providerID)', async () => {
    await withController(
      [machineOn('m1', 'i-old', 'Running')],
      nodeOf('i-old', undefined),
      async (env, nc) => {
        await env.target.delete(CoreResources.nodes, NODE);
        await env.settle();
        await nc.reconcile(NODE, rctx);
        expect(alive(env, 'm1'), 'm1 deleted').to.equal(false);
      },
    );
  });

  it('leaves alone the newer machine that already claims the reused name of a deleted node that was another machine’s (by label or by providerID)', async () => {
    for (const label of ['m-old', undefined]) {
      // The old machine is gone already; its replacement got the same private IP, so its VM's node
      // will have the same name, and it holds that name before the node registers.
      await withController(
        [machineOn('m-new', 'i-new', 'Pending')],
        nodeOf('i-old', label),
        async (env, nc) => {
          await env.target.delete(CoreResources.nodes, NODE);
          await env.settle();
          await nc.reconcile(NODE, rctx);
          expect(alive(env, 'm-new'), `m-new kept (old node labelled ${String(label)})`).to.equal(true);
          expect(env.recorder.events).to.deep.equal([]);
        },
      );
    }
  });

  it('deletes the machine of a deleted node even when another VM’s node of that name registered before the reconcile', async () => {
    await withController([machineOn('m1', 'i-old', 'Running')], nodeOf('i-old', 'm1'), async (env, nc) => {
      await env.target.delete(CoreResources.nodes, NODE);
      await env.settle();
      env.seed(CoreResources.nodes, nodeOf('i-new', undefined));
      await env.settle();
      await nc.reconcile(NODE, rctx);
      expect(alive(env, 'm1'), 'm1 deleted').to.equal(false);
    });
  });

  it('does nothing for a node that exists and is not being deleted', async () => {
    await withController([machineOn('m1', 'i-old', 'Running')], nodeOf('i-old', 'm1'), async (env, nc) => {
      await nc.reconcile(NODE, rctx);
      expect(alive(env, 'm1'), 'm1 kept').to.equal(true);
      expect(env.api.writes(), 'no write').to.deep.equal([]);
    });
  });

  it('records no deletion once stopped (a controller that lost the Lease keeps its informer handlers)', async () => {
    await withController([machineOn('m1', 'i-old', 'Running')], nodeOf('i-old', 'm1'), async (env, nc) => {
      await nc.stop();
      await env.target.delete(CoreResources.nodes, NODE);
      await env.settle();
      expect((nc as unknown as { deleted: Map<string, unknown> }).deleted.size, 'nothing kept').to.equal(0);
      await nc.reconcile(NODE, rctx);
      expect(alive(env, 'm1'), 'm1 kept by a stopped controller').to.equal(true);
    });
  });
});
