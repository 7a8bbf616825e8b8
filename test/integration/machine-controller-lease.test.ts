// gardener's provider machine-controller campaigns for the Lease `machine-controller`, ours for
// `machine-controller-manager`: two Leases, so without more a gardener machine-controller left
// running beside our manager (a sidecar not yet removed after a switch, a chart upgrade that starts
// the new pod before the old one stops) would manage the same Machines as our machine controller —
// two VMs for one machine. Our leader also holds `machine-controller` while it runs the machine
// controller. Real processes: gardener's machine-controller (the provider app of gardener MCM
// v0.62.1 with the virtual cloud's Go driver) with leader election, and our manager.

import { hostname } from 'node:os';

import { expect } from 'chai';

import type { ControllerName } from '../../lib/config.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Lease } from '../../lib/kube/types.js';
import { startGardenerMachineController } from '../harness/gardener.js';
import type { ManagedProcess } from '../harness/process.js';
import { LifecycleEnv, NS } from './env/lifecycle.js';
import { until } from './env/until.js';

const LEASE_SECONDS = 6;
const gardenerLeaderElection = [
  '--leader-elect=true',
  `--leader-elect-lease-duration=${LEASE_SECONDS}s`,
  '--leader-elect-renew-deadline=5s',
  '--leader-elect-retry-period=1s',
];
const GARDENER_ACQUIRED = 'successfully acquired lease';
/** How often gardener's machine-controllers of this file logged that they acquired their Lease (one log file for all). */
const acquisitions = (p: ManagedProcess): number => p.tail(2000).split(GARDENER_ACQUIRED).length - 1;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('gardener’s provider machine-controller and our machine controller never run at once (the Lease machine-controller)', function () {
  this.timeout(180_000);
  let env: LifecycleEnv;
  let sidecar: ManagedProcess | undefined;

  before(async function () {
    this.timeout(180_000);
    env = await LifecycleEnv.start();
  });

  afterEach(async () => {
    await env.stopManager();
    await sidecar?.stop(5000);
    sidecar = undefined;
  });

  after(async () => {
    await (env as LifecycleEnv | undefined)?.stop();
  });

  const holder = async (name: string): Promise<string> =>
    (await env.client.get<Lease>(CoreResources.leases, name, NS)).spec?.holderIdentity ?? '';
  // gardener's identity is the host name; ours is "<host name>_<uuid>".
  const ours = (id: string): boolean => id.startsWith(`${hostname()}_`);

  async function startOurs(controllers?: ControllerName[]): Promise<void> {
    await env.startManager({
      leaderElect: true,
      leaderElectLeaseDurationMs: LEASE_SECONDS * 1000,
      leaderElectRenewDeadlineMs: 5_000,
      leaderElectRetryPeriodMs: 1_000,
      ...(controllers === undefined ? {} : { controllers }),
    });
  }

  /** For two lease durations, at every look: `check` holds. */
  async function holdsFor(what: string, check: () => Promise<boolean>): Promise<void> {
    const end = Date.now() + 2 * LEASE_SECONDS * 1000;
    while (Date.now() < end) {
      expect(await check(), what).to.equal(true);
      await sleep(500);
    }
  }

  it('a gardener machine-controller holding its Lease keeps our manager (every controller) from running its controllers until it stops; then ours takes that Lease too', async () => {
    const gardener = await startGardenerMachineController(env.cp, NS, gardenerLeaderElection);
    sidecar = gardener;
    await until(
      'gardener’s machine-controller holds its Lease',
      async () => (await holder('machine-controller')) === hostname(),
      30_000,
    );
    await startOurs();
    await until(
      'ours holds machine-controller-manager',
      async () => ours(await holder('machine-controller-manager')),
      30_000,
    );
    await holdsFor(
      'ours waits: no controller runs, the machine-controller Lease stays gardener’s',
      async () => env.manager?.isLeading() === false && (await holder('machine-controller')) === hostname(),
    );
    await gardener.stop(5000);
    sidecar = undefined;
    await until(
      'ours holds machine-controller and runs its controllers',
      async () => env.manager?.isLeading() === true && ours(await holder('machine-controller')),
      (LEASE_SECONDS + 15) * 1000,
    );
  });

  it('with ours holding both Leases, a gardener machine-controller started beside it waits, and takes its Lease once ours stops', async () => {
    await startOurs();
    await until('ours runs its controllers', () => env.manager?.isLeading() === true, 30_000);
    expect(ours(await holder('machine-controller'))).to.equal(true);
    const gardener = await startGardenerMachineController(env.cp, NS, gardenerLeaderElection);
    sidecar = gardener;
    const acquiredBefore = acquisitions(gardener);
    await holdsFor(
      'gardener’s machine-controller waits: the Lease stays ours',
      async () => ours(await holder('machine-controller')) && acquisitions(gardener) === acquiredBefore,
    );
    expect(env.manager?.isLeading()).to.equal(true);
    await env.stopManager();
    await until(
      'gardener’s machine-controller takes its Lease (ours released it on stop)',
      async () =>
        (await holder('machine-controller')) === hostname() && acquisitions(gardener) === acquiredBefore + 1,
      (LEASE_SECONDS + 15) * 1000,
    );
  });

  it('in the sidecar split (no machine controller) ours does not campaign for it: gardener’s machine-controller and our other controllers both run', async () => {
    const gardener = await startGardenerMachineController(env.cp, NS, gardenerLeaderElection);
    sidecar = gardener;
    await until(
      'gardener’s machine-controller holds its Lease',
      async () => (await holder('machine-controller')) === hostname(),
      30_000,
    );
    await startOurs(['machineset', 'machinedeployment', 'safety']);
    await until('ours runs its controllers', () => env.manager?.isLeading() === true, 30_000);
    await holdsFor(
      'gardener keeps its Lease',
      async () => (await holder('machine-controller')) === hostname(),
    );
  });
});
