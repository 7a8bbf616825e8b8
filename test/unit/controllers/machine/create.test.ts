import { gzipSync } from 'node:zlib';

import { expect } from 'chai';

import { MachineResource, type Machine, type MachineClass } from '../../../../lib/api/types.js';
import { MachineError } from '../../../../lib/driver/codes.js';
import type { Driver } from '../../../../lib/driver/driver.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import type { Node, Secret } from '../../../../lib/kube/types.js';
import { machine } from '../builders.js';
import { FINALIZER, driverCalls, machineControllerEnv, rctx } from './harness.js';

const NODE = 'ip-10-0-0-7.eu-west-1.compute.internal';

/** A cloud whose VMs are named by IP (the node name differs from the machine name), as EC2's. */
function ipNamedCloud(): { driver: Driver; deleted: string[] } {
  const deleted: string[] = [];
  const driver: Driver = {
    getMachineStatus: () => Promise.reject(new MachineError('NotFound', 'no VM')),
    createMachine: () => Promise.resolve({ providerID: 'aws:///eu-west-1/i-0007', nodeName: NODE }),
    initializeMachine: () => Promise.reject(new MachineError('Unimplemented', 'nothing to do')),
    deleteMachine: (req) => {
      deleted.push(req.machine.spec?.providerID ?? '');
      return Promise.resolve({});
    },
    listMachines: () => Promise.resolve({ machineList: {} }),
    getVolumeIDs: () => Promise.resolve({ volumeIDs: [] }),
  };
  return { driver, deleted };
}

const fakeClass: MachineClass = {
  metadata: { name: 'ec2', namespace: 'default', finalizers: [FINALIZER] },
  provider: 'ipcloud',
  providerSpec: {},
};

const node = (providerID: string): Node => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name: NODE },
  spec: { providerID },
});

describe('machine creation: a Node that exists when CreateMachine answers', () => {
  it("is the new VM's own when its providerID names that VM (a kubelet's zone form): the machine goes on", async () => {
    const cloud = ipNamedCloud();
    const m = machine('m1');
    m.spec = { ...m.spec, class: { kind: 'MachineClass', name: 'ec2' } };
    const { env, mc } = await machineControllerEnv([m], {
      machineClass: fakeClass,
      provider: { name: 'ipcloud', driver: cloud.driver },
      seed: (e) => {
        e.seed(CoreResources.nodes, node('aws:///eu-west-1a/i-0007'));
      },
    });
    await mc.reconcile('default/m1', rctx);
    expect(cloud.deleted, 'no VM deleted').to.deep.equal([]);
    const patched = env.api.writes().find((w) => w.subresource === undefined && w.verb === 'patch');
    expect(patched?.body).to.deep.include({ spec: { providerID: 'aws:///eu-west-1/i-0007' } });
    await env.stop();
  });

  it('is a stale node of another VM when its providerID names another: the new VM is deleted and the machine fails', async () => {
    const cloud = ipNamedCloud();
    const m = machine('m1');
    m.spec = { ...m.spec, class: { kind: 'MachineClass', name: 'ec2' } };
    const { env, mc } = await machineControllerEnv([m], {
      machineClass: fakeClass,
      provider: { name: 'ipcloud', driver: cloud.driver },
      seed: (e) => {
        e.seed(CoreResources.nodes, node('aws:///eu-west-1a/i-0001'));
      },
    });
    await mc.reconcile('default/m1', rctx);
    expect(cloud.deleted).to.deep.equal(['aws:///eu-west-1/i-0007']);
    const status = env.api.writes().find((w) => w.subresource === 'status');
    expect(JSON.stringify(status?.body)).to.include('VM using old node obj');
    await env.stop();
  });
});

describe('machine creation: the bootstrap token', () => {
  it('is deleted once the node joined, by the UID of the Secret the creation made, without reading it again', async () => {
    const cloud = ipNamedCloud();
    const m = machine('m1');
    m.spec = { ...m.spec, class: { kind: 'MachineClass', name: 'ec2' } };
    const { env, mc } = await machineControllerEnv([m], {
      machineClass: { ...fakeClass, secretRef: { name: 'cloud', namespace: 'default' } },
      provider: { name: 'ipcloud', driver: cloud.driver },
      seed: (e) => {
        e.seed(CoreResources.secrets, {
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: { name: 'cloud', namespace: 'default' },
          data: { userData: Buffer.from('join --token <<BOOTSTRAP_TOKEN>>').toString('base64') },
        } as Secret);
      },
    });
    try {
      await mc.reconcile('default/m1', rctx);
      const tokens = (): Secret[] =>
        env.target
          .all<Secret>(CoreResources.secrets, 'kube-system')
          .filter((s) => s.type === 'bootstrap.kubernetes.io/token');
      expect(tokens(), 'a token for the new VM').to.have.length(1);
      // The VM's kubelet registers, Ready.
      const joined = node('aws:///eu-west-1a/i-0007');
      joined.status = { conditions: [{ type: 'Ready', status: 'True' }] };
      env.target.seed(CoreResources.nodes, joined);
      await env.settle();
      env.target.clearActions();
      await mc.reconcile('default/m1', rctx);
      expect(env.api.all<Machine>(MachineResource)[0]?.status?.currentStatus?.phase).to.equal('Running');
      expect(tokens(), 'the token is gone').to.have.length(0);
      expect(
        env.target.actions.filter((a) => a.resource.includes('secrets')).map((a) => a.verb),
        'one request for the token: its deletion',
      ).to.deep.equal(['delete']);
    } finally {
      await env.stop();
    }
  });
});

describe('machine creation: user data', () => {
  const withUserData = async (userData: Buffer): Promise<string | undefined> => {
    const cloud = ipNamedCloud();
    let sent: string | undefined;
    const driver: Driver = {
      ...cloud.driver,
      createMachine: (req) => {
        sent = req.secret.data?.userData;
        return cloud.driver.createMachine(req);
      },
    };
    const m = machine('m1');
    m.spec = { ...m.spec, class: { kind: 'MachineClass', name: 'ec2' } };
    const { env, mc } = await machineControllerEnv([m], {
      machineClass: { ...fakeClass, secretRef: { name: 'cloud', namespace: 'default' } },
      provider: { name: 'ipcloud', driver },
      seed: (e) => {
        e.seed(CoreResources.secrets, {
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: { name: 'cloud', namespace: 'default' },
          data: { userData: userData.toString('base64') },
        } as Secret);
      },
    });
    try {
      await mc.reconcile('default/m1', rctx);
      return sent;
    } finally {
      await env.stop();
    }
  };

  it('reaches the driver byte for byte when gzipped', async () => {
    const gz = gzipSync(Buffer.from('#cloud-config\nwrite_files: []\n'.repeat(50)));
    const sent = await withUserData(gz);
    expect(sent, 'user data sent').to.be.a('string');
    expect(Buffer.from(sent ?? '', 'base64').equals(gz)).to.be.true;
  });

  it('has its placeholders filled without touching the bytes around them', async () => {
    const raw = Buffer.concat([
      Buffer.from([0xff, 0x00]),
      Buffer.from('name=<<MACHINE_NAME>>'),
      Buffer.from([0x80]),
    ]);
    const sent = Buffer.from((await withUserData(raw)) ?? '', 'base64');
    expect([...sent]).to.deep.equal([0xff, 0x00, ...Buffer.from('name=m1'), 0x80]);
  });
});

describe('machine creation: initialisation is never skipped', () => {
  const cloudWith = (
    status: Driver['getMachineStatus'],
  ): { driver: Driver; initialized: string[]; created: number } => {
    const base = ipNamedCloud();
    const out = { driver: base.driver, initialized: [] as string[], created: 0 };
    out.driver = {
      ...base.driver,
      getMachineStatus: status,
      createMachine: (req) => {
        out.created++;
        return base.driver.createMachine(req);
      },
      initializeMachine: (req) => {
        out.initialized.push(req.machine.spec?.providerID ?? '');
        return Promise.resolve({ providerID: req.machine.spec?.providerID ?? '', nodeName: NODE });
      },
    };
    return out;
  };

  it('records and initialises the VM an Uninitialized GetMachineStatus names on a machine that records none', async () => {
    const cloud = cloudWith(() =>
      Promise.reject(
        new MachineError('Uninitialized', 'source/destination check still on', {
          vm: { providerID: 'aws:///eu-west-1/i-0042', nodeName: NODE },
        }),
      ),
    );
    const m = machine('m1');
    m.spec = { ...m.spec, class: { kind: 'MachineClass', name: 'ec2' } };
    const { env, mc } = await machineControllerEnv([m], {
      machineClass: fakeClass,
      provider: { name: 'ipcloud', driver: cloud.driver },
    });
    try {
      await mc.reconcile('default/m1', rctx);
      expect(cloud.created, 'no second VM').to.equal(0);
      expect(cloud.initialized).to.deep.equal(['aws:///eu-west-1/i-0042']);
      const saved = env.api.all<Machine>(MachineResource)[0];
      expect(saved?.spec?.providerID).to.equal('aws:///eu-west-1/i-0042');
      expect(saved?.status?.currentStatus?.phase).to.equal('Pending');
    } finally {
      await env.stop();
    }
  });

  it('initialises a recorded VM its cloud does not show yet (NotFound) instead of moving the machine on without it', async () => {
    const cloud = cloudWith(() => Promise.reject(new MachineError('NotFound', 'not visible yet')));
    const m = machine('m1');
    m.spec = {
      ...m.spec,
      class: { kind: 'MachineClass', name: 'ec2' },
      providerID: 'aws:///eu-west-1/i-0007',
    };
    m.metadata.labels = { ...m.metadata.labels, node: NODE };
    m.status = {
      currentStatus: { phase: 'CrashLoopBackOff', lastUpdateTime: '2026-11-21T09:00:00Z' },
      lastOperation: {
        type: 'Create',
        state: 'Failed',
        description: 'Provider error: x. Initialize VM Instance',
      },
    };
    const { env, mc } = await machineControllerEnv([m], {
      machineClass: fakeClass,
      provider: { name: 'ipcloud', driver: cloud.driver },
    });
    try {
      await mc.reconcile('default/m1', rctx);
      expect(cloud.created, 'no second VM').to.equal(0);
      expect(cloud.initialized).to.deep.equal(['aws:///eu-west-1/i-0007']);
    } finally {
      await env.stop();
    }
  });
});

describe('machine creation: when a refused creation is retried', () => {
  const refusing = (retryAfterMs?: number): Driver => ({
    ...ipNamedCloud().driver,
    createMachine: () =>
      Promise.reject(
        new MachineError(
          'ResourceExhausted',
          'offering unavailable',
          retryAfterMs === undefined ? {} : { retryAfterMs },
        ),
      ),
  });
  const pending = (): Machine => {
    const m = machine('m1');
    m.spec = { ...m.spec, class: { kind: 'MachineClass', name: 'ec2' } };
    // A minute old on the harness's clock: well within the creation timeout.
    m.metadata.creationTimestamp = '2026-11-21T09:59:00Z';
    return m;
  };

  for (const [hint, want] of [
    [undefined, 600_000],
    [45_000, 45_000],
    [3_600_000, 600_000],
  ] as const) {
    it(`ResourceExhausted with ${hint === undefined ? 'no retry hint' : `a hint of ${hint} ms`} is retried after ${want} ms (--resource-exhausted-retry is 10m)`, async () => {
      const { env, mc } = await machineControllerEnv([pending()], {
        machineClass: { ...fakeClass, secretRef: { name: 'cloud', namespace: 'default' } },
        provider: { name: 'ipcloud', driver: refusing(hint) },
        seed: (e) => {
          e.seed(CoreResources.secrets, {
            apiVersion: 'v1',
            kind: 'Secret',
            metadata: { name: 'cloud', namespace: 'default' },
            data: { userData: Buffer.from('#!/bin/sh').toString('base64') },
          } as Secret);
        },
      });
      try {
        const r = await mc.reconcile('default/m1', rctx);
        expect(r.requeueAfter).to.equal(want);
        const m = env.api.all<Machine>(MachineResource)[0];
        expect(m?.status?.lastOperation?.errorCode).to.equal('ResourceExhausted');
        expect(m?.status?.currentStatus?.phase).to.equal('CrashLoopBackOff');
      } finally {
        await env.stop();
      }
    });
  }
});

describe('machine creation: a reconcile from a cache that does not show the creation’s writes yet', () => {
  it('calls no driver and writes nothing until the cache shows them, then goes on from there', async () => {
    const m = machine('m1');
    m.status = {};
    const { env, mc } = await machineControllerEnv([m]);
    try {
      env.api.holdWatches();
      await mc.reconcile('default/m1', rctx);
      const calls = await driverCalls(env, 'get_machine_status');
      const writes = env.api.writes().length;
      expect(env.api.all<Machine>(MachineResource)[0]?.status?.currentStatus?.phase).to.equal('Pending');

      // Another event (the VM's Node appearing) enqueues the machine while its watch lags.
      const again = await mc.reconcile('default/m1', rctx);
      expect(await driverCalls(env, 'get_machine_status'), 'no second look at the VM').to.equal(calls);
      expect(env.api.writes().length, 'no write from the stale machine').to.equal(writes);
      expect(again.requeueAfter, 'looked at again in case the event never comes')
        .to.be.greaterThan(0)
        .and.at.most(5_000);

      env.api.releaseWatches();
      await env.settle();
      await mc.reconcile('default/m1', rctx);
      expect(await driverCalls(env, 'get_machine_status'), 'no creation pass again').to.equal(calls);
    } finally {
      await env.stop();
    }
  });
});
