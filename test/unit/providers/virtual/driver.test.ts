import { expect } from 'chai';

import type { Machine, MachineClass } from '../../../../lib/api/types.js';
import { decodeMachineError } from '../../../../lib/driver/codes.js';
import type { Driver, MachineRequest } from '../../../../lib/driver/driver.js';
import { FakeClock } from '../../../../lib/kube/clock.js';
import { Informer } from '../../../../lib/kube/informer.js';
import { CoreResources } from '../../../../lib/kube/resources.js';
import type { Node } from '../../../../lib/kube/types.js';
import { CapturingLogger } from '../../../../lib/observability/logger.js';
import { newRegistry } from '../../../../lib/observability/metrics.js';
import { virtualProvider } from '../../../../lib/providers/virtual/index.js';
import { FakeKube } from '../../../fakes/kube.js';
import { eventually } from '../../helpers/eventually.js';

function cls(providerSpec: Record<string, unknown> = {}, zone = 'z1'): MachineClass {
  return {
    metadata: { name: 'c', namespace: 'ns' },
    provider: 'virtual',
    providerSpec,
    nodeTemplate: { capacity: { cpu: '2' }, instanceType: 'small', region: 'r', zone },
  };
}

function req(name: string, c: MachineClass, providerID?: string): MachineRequest {
  const machine: Machine = {
    metadata: { name, namespace: 'ns' },
    spec: providerID === undefined ? {} : { providerID },
  };
  return { machine, machineClass: c, secret: { metadata: {} } };
}

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'OK';
  } catch (err) {
    return decodeMachineError(err).code;
  }
}

describe('virtual provider driver (in-memory API)', () => {
  let target: FakeKube;
  let nodes: Informer<Node>;
  let driver: Driver;
  let random: number;
  const clock = new FakeClock(Date.UTC(2026, 0, 1));

  beforeEach(async () => {
    target = new FakeKube({ now: () => clock.now() });
    nodes = new Informer<Node>({
      client: target,
      resource: CoreResources.nodes,
      logger: new CapturingLogger(),
    });
    random = 0.99;
    const provider = virtualProvider({ random: () => random })({
      control: new FakeKube(),
      target,
      namespace: 'ns',
      nodes,
      clock,
      logger: new CapturingLogger(),
      registry: newRegistry(),
    });
    driver = provider.driver;
    nodes.start();
    await nodes.waitForSync();
  });

  afterEach(async () => {
    await nodes.stop();
  });

  const settle = (n: number): Promise<void> => eventually(() => nodes.size() === n, `${n} nodes cached`);

  it('creates one VM per machine: a second create returns the first VM, even before the cache shows it', async () => {
    const a = await driver.createMachine(req('m1', cls()));
    const b = await driver.createMachine(req('m1', cls()));
    expect(a.providerID).to.equal('virtual://z1/m1');
    expect(b).to.deep.include({ providerID: a.providerID, nodeName: 'm1' });
    await settle(1);
    const c = await driver.createMachine(req('m1', cls()));
    expect(c.providerID).to.equal(a.providerID);
    expect(target.all(CoreResources.nodes)).to.have.length(1);
  });

  it('refuses a node of that name that is not the machine’s VM', async () => {
    target.seed(CoreResources.nodes, { metadata: { name: 'm1' } });
    expect(await code(driver.createMachine(req('m1', cls())))).to.equal('AlreadyExists');
  });

  it('reports NotFound before creation and the VM after, and NotFound again once it is deleted', async () => {
    expect(await code(driver.getMachineStatus(req('m1', cls())))).to.equal('NotFound');
    await driver.createMachine(req('m1', cls()));
    await settle(1);
    const status = await driver.getMachineStatus(req('m1', cls()));
    expect(status.nodeName).to.equal('m1');
    expect(await code(driver.deleteMachine(req('m1', cls(), status.providerID)))).to.equal('OK');
    await settle(0);
    expect(await code(driver.deleteMachine(req('m1', cls(), status.providerID)))).to.equal('NotFound');
    expect(await code(driver.getMachineStatus(req('m1', cls())))).to.equal('NotFound');
  });

  it('initializes a VM it has just created although the cache does not show it yet', async () => {
    target.holdWatches();
    const created = await driver.createMachine(req('m1', cls()));
    expect(nodes.size(), 'the cache does not show the VM').to.equal(0);
    const init = await driver.initializeMachine(req('m1', cls(), created.providerID));
    expect(init.providerID).to.equal(created.providerID);
    expect(init.nodeName).to.equal('m1');
    target.releaseWatches();
  });

  it('finds a VM the cache does not show yet when deleting, so no VM leaks', async () => {
    target.holdWatches();
    await target.create(CoreResources.nodes, {
      metadata: {
        name: 'm9',
        labels: { 'virtual.mcm-ts.io/vm': 'true' },
        annotations: { 'virtual.mcm-ts.io/machine': 'ns/m9', 'virtual.mcm-ts.io/machine-class': 'c' },
      },
      spec: { providerID: 'virtual://z1/m9' },
    });
    expect(nodes.size(), 'the cache does not show the VM').to.equal(0);
    expect(await code(driver.deleteMachine(req('m9', cls())))).to.equal('OK');
    expect(target.all(CoreResources.nodes)).to.have.length(0);
    target.releaseWatches();
  });

  it('no longer lists or finds a VM once its deletion was answered, although the cache still shows it', async () => {
    const c = cls();
    const created = await driver.createMachine(req('m1', c));
    await driver.createMachine(req('m2', c));
    await settle(2);
    target.holdWatches();
    expect(await code(driver.deleteMachine(req('m1', c, created.providerID)))).to.equal('OK');
    expect(nodes.size(), 'the cache still shows the VM').to.equal(2);
    const listed = await driver.listMachines({ machineClass: c, secret: { metadata: {} } });
    expect(listed.machineList).to.deep.equal({ 'virtual://z1/m2': 'm2' });
    expect(await code(driver.getMachineStatus(req('m1', c, created.providerID)))).to.equal('NotFound');
    target.releaseWatches();
    await settle(1);
    // A new VM of the same name (another object) is seen again.
    await driver.createMachine(req('m1', c));
    await settle(2);
    expect(
      (await driver.listMachines({ machineClass: c, secret: { metadata: {} } })).machineList,
    ).to.have.keys('virtual://z1/m1', 'virtual://z1/m2');
  });

  it('fails with ResourceExhausted once a zone is full, counting creations in flight', async () => {
    const c = cls({ zoneCapacity: { z1: 2 } });
    const results = await Promise.all(['a', 'b', 'c'].map((n) => code(driver.createMachine(req(n, c)))));
    expect(results.sort()).to.deep.equal(['OK', 'OK', 'ResourceExhausted']);
    expect(
      await code(driver.createMachine(req('d', c))),
      'VMs just created count before the cache shows them',
    ).to.equal('ResourceExhausted');
    await settle(2);
    expect(await code(driver.createMachine(req('d', c)))).to.equal('ResourceExhausted');
    expect(await code(driver.createMachine(req('e', cls({ zoneCapacity: { z1: 2 } }, 'z2'))))).to.equal('OK');
  });

  it('injects Unavailable errors at the configured rate, doing nothing then', async () => {
    const c = cls({ errorRate: 0.5 });
    random = 0.4;
    expect(await code(driver.createMachine(req('m1', c)))).to.equal('Unavailable');
    expect(target.all(CoreResources.nodes)).to.have.length(0);
    random = 0.6;
    expect(await code(driver.createMachine(req('m1', c)))).to.equal('OK');
  });

  it('rejects a bad providerSpec with InvalidArgument before touching anything', async () => {
    expect(await code(driver.createMachine(req('m1', cls({ bootDelay: 'later' }))))).to.equal(
      'InvalidArgument',
    );
    expect(target.writes()).to.have.length(0);
  });

  it('reports a VM whose boot never completes as Uninitialized', async () => {
    const c = cls({ failure: { bootNeverCompletes: true } });
    await driver.createMachine(req('m1', c));
    await settle(1);
    expect(await code(driver.getMachineStatus(req('m1', c)))).to.equal('Uninitialized');
    expect(await code(driver.initializeMachine(req('m1', c)))).to.equal('Uninitialized');
  });

  it('lists the VMs of a class by providerID, and maps CSI volumes to their handles', async () => {
    await driver.createMachine(req('m1', cls()));
    await driver.createMachine(req('m2', cls()));
    await settle(2);
    expect(
      (await driver.listMachines({ machineClass: cls(), secret: { metadata: {} } })).machineList,
    ).to.deep.equal({
      'virtual://z1/m1': 'm1',
      'virtual://z1/m2': 'm2',
    });
    const other = { ...cls(), metadata: { name: 'other', namespace: 'ns' } };
    expect(
      (await driver.listMachines({ machineClass: other, secret: { metadata: {} } })).machineList,
    ).to.deep.equal({});
    const ids = await driver.getVolumeIDs({
      pvSpecs: [
        { csi: { driver: 'virtual.csi.mcm-ts.io', volumeHandle: 'vol-1' } },
        { csi: { driver: 'ebs.csi.aws.com', volumeHandle: 'vol-foreign' } },
        { hostPath: { path: '/x' } },
      ],
    });
    expect(ids.volumeIDs).to.deep.equal(['vol-1']);
  });
});
