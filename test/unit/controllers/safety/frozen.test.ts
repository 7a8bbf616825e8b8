import { expect } from 'chai';

import {
  API_VERSION,
  MachineClassResource,
  MachineResource,
  type Machine,
  type MachineClass,
} from '../../../../lib/api/types.js';
import { MachineController } from '../../../../lib/controllers/machine/controller.js';
import { defaultMachineControllerSettings } from '../../../../lib/controllers/machine/settings.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import type { Node } from '../../../../lib/kube/types.js';
import { nullLogger } from '../../../../lib/observability/logger.js';
import { ControllerTestEnv } from '../env.js';

const rctx = { log: nullLogger, signal: new AbortController().signal };

const cls: MachineClass = {
  apiVersion: API_VERSION,
  kind: 'MachineClass',
  metadata: {
    name: 'small',
    namespace: 'default',
    finalizers: ['machine.sapcloud.io/machine-controller-manager'],
  },
  provider: 'virtual',
  providerSpec: {},
};

/** A machine Unknown for an hour (far past the health timeout) on a node that is not Ready. */
function unknownMachine(name: string, deleting = false): Machine {
  return {
    apiVersion: API_VERSION,
    kind: 'Machine',
    metadata: {
      name,
      namespace: 'default',
      uid: `uid-${name}`,
      labels: { node: name },
      finalizers: ['machine.sapcloud.io/machine-controller-manager'],
      ...(deleting ? { deletionTimestamp: '2026-11-21T09:59:00Z' } : {}),
    },
    spec: { class: { kind: 'MachineClass', name: 'small' }, providerID: `virtual://virtual-zone-a/${name}` },
    status: {
      currentStatus: { phase: 'Unknown', lastUpdateTime: '2026-11-21T09:00:00Z' },
      conditions: [{ type: 'Ready', status: 'Unknown' }],
    },
  };
}

function notReadyNode(name: string): Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels: { 'node.gardener.cloud/machine-name': name } },
    spec: { providerID: `virtual://virtual-zone-a/${name}` },
    status: { conditions: [{ type: 'Ready', status: 'Unknown' }] },
  };
}

describe('machine controller while frozen (API-server safety seam)', () => {
  let env: ControllerTestEnv;
  let frozen: boolean;
  let mc: MachineController;

  beforeEach(async () => {
    env = new ControllerTestEnv();
    frozen = true;
    env.seed(MachineClassResource, cls);
    env.seed(MachineResource, unknownMachine('stuck'), unknownMachine('going', true));
    env.seed(CoreResources.nodes, notReadyNode('stuck'), notReadyNode('going'));
    const providers = env.virtualProviders();
    mc = new MachineController(env.ctx, {
      settings: defaultMachineControllerSettings,
      providers,
      workers: 1,
      frozen: () => frozen,
    });
    await env.start();
    env.api.clearActions();
    env.target.clearActions();
  });

  afterEach(async () => {
    await env.stop();
  });

  it('a machine past its health timeout is neither marked Failed nor touched while frozen, and is once unfrozen', async () => {
    const r = await mc.reconcile('default/stuck', rctx);
    expect([...env.api.writes(), ...env.target.writes()], 'nothing written while frozen').to.have.length(0);
    expect(r.requeueAfter).to.be.greaterThan(0);
    frozen = false;
    await mc.reconcile('default/stuck', rctx);
    const status = env.api.writes().find((w) => w.subresource === 'status')?.body as {
      status: Machine['status'];
    };
    expect(status.status?.currentStatus?.phase, 'the same machine unfrozen is marked Failed').to.equal(
      'Failed',
    );
  });

  it('deletions go on while frozen', async () => {
    await mc.reconcile('default/going', rctx);
    const phases = env.api
      .writes()
      .filter((w) => w.subresource === 'status')
      .map((w) => (w.body as { status: Machine['status'] }).status?.currentStatus?.phase);
    expect(phases[0]).to.equal('Terminating');
  });
});
