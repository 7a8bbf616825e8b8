import { expect } from 'chai';

import {
  MachineClassResource,
  MachineResource,
  type Machine,
  type MachineClass,
} from '../../../lib/api/types.js';
import {
  MachineClassController,
  RELEASE_RETRY_MS,
  ReleaseDeferredError,
} from '../../../lib/controllers/machineclass/controller.js';
import { UnavailableError } from '../../../lib/kube/errors.js';
import { OrphanVmCollector } from '../../../lib/controllers/safety/orphans.js';
import { CoreResources } from '../../../lib/kube/resources.js';
import { nullLogger } from '../../../lib/observability/logger.js';
import { NS, machine, virtualClass, virtualVm } from './builders.js';
import { ControllerTestEnv } from './env.js';

const rctx = { log: nullLogger, signal: new AbortController().signal };
const FINALIZER = 'machine.sapcloud.io/machine-controller-manager';

describe('MachineClassController', () => {
  let env: ControllerTestEnv;
  let controller: MachineClassController;
  let frozen: boolean;
  let inFlight: Set<string>;

  const storedClass = (): MachineClass | undefined =>
    env.api.peek<MachineClass>(MachineClassResource, 'small', NS);

  /** The class controller, with the orphan VM collection (the machine controller runs here) or without. */
  async function setup(opts: { collection: boolean }, ...machines: Machine[]): Promise<void> {
    env.seed(MachineClassResource, virtualClass('small', [FINALIZER]));
    env.seed(MachineResource, ...machines);
    const providers = env.virtualProviders();
    const orphans = new OrphanVmCollector(env.ctx, {
      providers,
      periodMs: 60 * 60_000,
      frozen: () => frozen,
      creationInFlight: (key) => inFlight.has(key),
    });
    controller = new MachineClassController(env.ctx, {
      beforeRelease: opts.collection ? (cls, log) => orphans.passBeforeRelease(cls, log) : undefined,
    });
    await env.start();
  }

  /** The class is deleted; its VM `lost` outlived its machine (providerID write lost, machine gone). */
  async function deleteClassWithLostVm(opts: { collection: boolean }): Promise<void> {
    env.seed(CoreResources.nodes, virtualVm('lost', 'lost'), virtualVm('other', 'other', 'big'));
    await setup(opts);
    await env.api.delete(MachineClassResource, 'small', { namespace: NS });
    await env.settle();
    env.api.clearActions();
  }

  beforeEach(() => {
    env = new ControllerTestEnv();
    frozen = false;
    inFlight = new Set();
  });

  afterEach(async () => {
    await env.stop();
  });

  it('lets a deleted class go only after the VMs of its gone machines are collected', async () => {
    await deleteClassWithLostVm({ collection: true });
    expect(await controller.reconcile(`${NS}/small`, rctx)).to.deep.equal({});
    expect(env.nodeNames(), 'only the VM of another class is left').to.deep.equal(['other']);
    expect(storedClass()).to.equal(undefined);
  });

  it('keeps the finalizer of an unused class while a VM of it belongs to a machine being created', async () => {
    await deleteClassWithLostVm({ collection: true });
    inFlight.add(`${NS}/lost`);
    expect(await controller.reconcile(`${NS}/small`, rctx)).to.deep.equal({ requeueAfter: RELEASE_RETRY_MS });
    expect(env.nodeNames()).to.include('lost');
    expect(storedClass()?.metadata.finalizers).to.deep.equal([FINALIZER]);

    inFlight.clear();
    await controller.reconcile(`${NS}/small`, rctx);
    expect(env.nodeNames()).to.not.include('lost');
    expect(storedClass()).to.equal(undefined);
  });

  it('keeps the finalizer of an unused class while deleting a VM of it fails, retrying with backoff', async () => {
    await deleteClassWithLostVm({ collection: true });
    env.target.react((a) =>
      a.verb === 'delete' && a.name === 'lost'
        ? new UnavailableError('etcdserver: request timed out', 503, 'ServiceUnavailable')
        : undefined,
    );
    const error = await controller.reconcile(`${NS}/small`, rctx).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).to.be.instanceOf(ReleaseDeferredError);
    expect(env.nodeNames()).to.include('lost');
    expect(storedClass()?.metadata.finalizers).to.deep.equal([FINALIZER]);
  });

  it('keeps the finalizer of an unused class while the machine controller is frozen', async () => {
    await deleteClassWithLostVm({ collection: true });
    frozen = true;
    expect(await controller.reconcile(`${NS}/small`, rctx)).to.deep.equal({ requeueAfter: RELEASE_RETRY_MS });
    expect(env.nodeNames()).to.include('lost');
    expect(storedClass()?.metadata.finalizers).to.deep.equal([FINALIZER]);
  });

  it('removes the finalizer of an unused class at once when the machine controller runs elsewhere', async () => {
    await deleteClassWithLostVm({ collection: false });
    await controller.reconcile(`${NS}/small`, rctx);
    expect(storedClass()).to.equal(undefined);
  });

  it('keeps the finalizer while a machine refers to the class, without listing its VMs', async () => {
    env.seed(CoreResources.nodes, virtualVm('a', 'a'));
    await setup({ collection: true }, machine('a'));
    await env.api.delete(MachineClassResource, 'small', { namespace: NS });
    await env.settle();
    env.api.clearActions();
    await controller.reconcile(`${NS}/small`, rctx);
    expect(storedClass()?.metadata.finalizers).to.deep.equal([FINALIZER]);
    expect(env.nodeNames()).to.deep.equal(['a']);
    expect(env.api.writes()).to.deep.equal([]);
  });
});
