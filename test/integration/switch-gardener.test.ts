// Switching a fleet from gardener's machine-controller-manager to ours and back, on the EC2
// emulator, the way docs/switching-from-gardener.md tells an operator to do it. gardener's whole
// stack is real and unchanged: machine-controller-manager v0.62.1 (MachineDeployment, MachineSet,
// safety) with its own CRDs, and the AWS machine-controller of provider-aws v0.28.0. Each handover
// must leave the cloud alone: no instance started or stopped (every EC2 call of every controller
// goes through a counting proxy), no new MachineSet, machines with their names, UIDs and
// providerIDs, nodes with theirs. Two paths:
// A. gardener → ours (all controllers, the built-in AWS provider) → scale 3→4→3 → gardener again
//    (on our CRDs) → scale to zero;
// B. gardener (its CRDs re-applied) → ours with --controllers=machineset,machinedeployment,safety
//    beside gardener's AWS machine-controller → ours alone → scale 3→4→0.
// Both stacks run with leader election as they do by default, on shorter timings than the
// defaults so that a handover waits seconds, not 15 s.

import { readFileSync, readdirSync } from 'node:fs';
import { hostname } from 'node:os';
import path from 'node:path';

import { expect } from 'chai';
import yaml from 'js-yaml';

import type { Instance } from '@aws-sdk/client-ec2';

import { MachinePhase } from '../../lib/api/constants.js';
import {
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  MachineSetResource,
  type Machine,
  type MachineDeployment,
} from '../../lib/api/types.js';
import type { ControllerName } from '../../lib/config.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { KubeObject, Lease, Node } from '../../lib/kube/types.js';
import { Ec2KubeletSimulator } from '../harness/ec2kubelet.js';
import {
  CLUSTER_TAG,
  REGION,
  applySampleClass,
  instanceIdOf,
  isLive,
  provisionCloud,
  tagOf,
  taggedInstances,
  type Ec2Cloud,
} from '../harness/ec2cloud.js';
import { Ec2FaultProxy } from '../harness/ec2proxy.js';
import {
  applyCrdDirectory,
  gardenerAwsMachineControllerPath,
  gardenerCrdDir,
  gardenerMachineControllerManagerPath,
  startGardenerMachineController,
  startGardenerMachineControllerManager,
} from '../harness/gardener.js';
import { startMoto, type Moto } from '../harness/moto.js';
import type { ManagedProcess } from '../harness/process.js';
import { repoRoot } from '../harness/tools.js';
import { LifecycleEnv, NS, phaseOf } from './env/lifecycle.js';
import { until } from './env/until.js';

/** The chart's CRDs, as an operator applies them over gardener's. */
const OUR_CRDS = path.join(repoRoot, 'charts', 'machine-controller-manager', 'crds');

/** Lease timings of both stacks (defaults 15 s / 10 s / 2 s): a handover waits one lease, not 15 s. */
const LEASE_SECONDS = 6;
const RENEW_SECONDS = 5;
const RETRY_SECONDS = 1;
const gardenerLeaderElection = [
  '--leader-elect=true',
  `--leader-elect-lease-duration=${LEASE_SECONDS}s`,
  `--leader-elect-renew-deadline=${RENEW_SECONDS}s`,
  `--leader-elect-retry-period=${RETRY_SECONDS}s`,
];

/** The Leases each stack takes by default in the machines' namespace. */
const MCM_LEASE = 'machine-controller-manager';
const SIDECAR_LEASE = 'machine-controller';

/** How long a handover is watched once the new controllers have gone over every object. */
const SETTLE_MS = 5_000;

/** EC2 calls that start, stop or end an instance. */
const INSTANCE_LIFECYCLE_CALLS = [
  'RunInstances',
  'StartInstances',
  'StopInstances',
  'RebootInstances',
  'TerminateInstances',
];

const APP = 'workers';

interface CrdShape {
  metadata: { name: string };
  spec: { versions: { name: string; schema?: unknown; subresources?: unknown }[] };
}

const isReady = (n: Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

describe('switching a fleet from gardener’s MCM v0.62.1 + AWS machine-controller v0.28.0 to ours and back, on the EC2 emulator', function () {
  this.timeout(300_000);
  let moto: Moto;
  let proxy: Ec2FaultProxy;
  let env: LifecycleEnv;
  let cloud: Ec2Cloud;
  let kubelet: Ec2KubeletSimulator;
  let gardenerMcm: ManagedProcess | undefined;
  let gardenerSidecar: ManagedProcess | undefined;
  const savedEndpoint = process.env.AWS_ENDPOINT_URL_EC2;

  const live = async (): Promise<Instance[]> => (await taggedInstances(cloud.ec2)).filter(isLive);

  /** What a handover must leave as it was. */
  interface Fleet {
    /** Every instance of the cluster, whatever its state: `<id> <state>`. */
    instances: string[];
    /** `<name> <uid>` */
    machineSets: string[];
    /** `<name> <uid> <providerID> <node>` */
    machines: string[];
    /** `<name> <uid> <providerID>` */
    nodes: string[];
  }

  async function fleet(): Promise<Fleet> {
    const machines = await env.machines(APP);
    const sets = (await env.client.list(MachineSetResource, { namespace: NS })).items;
    return {
      instances: (await taggedInstances(cloud.ec2))
        .map((i) => `${i.InstanceId ?? ''} ${i.State?.Name ?? ''}`)
        .sort(),
      machineSets: sets.map((s) => `${s.metadata.name ?? ''} ${s.metadata.uid ?? ''}`).sort(),
      machines: machines
        .map(
          (m) =>
            `${m.metadata.name ?? ''} ${m.metadata.uid ?? ''} ${m.spec?.providerID ?? ''} ${m.metadata.labels?.node ?? ''}`,
        )
        .sort(),
      nodes: (await env.nodes())
        .map((n) => `${n.metadata.name ?? ''} ${n.metadata.uid ?? ''} ${n.spec?.providerID ?? ''}`)
        .sort(),
    };
  }

  /** EC2 calls so far that start, stop or end an instance, by action. */
  function lifecycleCalls(): Record<string, number> {
    return Object.fromEntries(INSTANCE_LIFECYCLE_CALLS.map((a) => [a, proxy.calls.get(a) ?? 0]));
  }

  /** n Running machines, each with a Ready Node of its own live instance, and no other live instance. */
  async function settled(n: number): Promise<Machine[]> {
    return until(
      `${n} Running machines, one Ready node and one live instance each`,
      async () => {
        const ms = await env.machines(APP);
        if (ms.length !== n || ms.some((m) => phaseOf(m) !== MachinePhase.Running)) return undefined;
        const nodes = new Map((await env.nodes()).map((node) => [node.metadata.name ?? '', node]));
        for (const m of ms) {
          const node = nodes.get(m.metadata.labels?.node ?? '');
          if (node === undefined || !isReady(node)) return undefined;
          if (instanceIdOf(node.spec?.providerID ?? '') !== instanceIdOf(m.spec?.providerID ?? ''))
            return undefined;
        }
        const ids = (await live()).map((i) => i.InstanceId ?? '').sort();
        const mine = ms.map((m) => instanceIdOf(m.spec?.providerID ?? '')).sort();
        return JSON.stringify(ids) === JSON.stringify(mine) ? ms : undefined;
      },
      120_000,
    );
  }

  const lease = async (name: string): Promise<Lease> => env.client.get<Lease>(CoreResources.leases, name, NS);

  /** Reconciles so far of one of our controllers (0 before it first ran). */
  async function reconciles(controller: string): Promise<number> {
    const metric = await env.manager?.registry.getSingleMetric('controller_runtime_reconcile_total')?.get();
    return (metric?.values ?? [])
      .filter((v) => v.labels.controller === controller)
      .reduce((n, v) => n + v.value, 0);
  }

  async function queuesEmpty(): Promise<boolean> {
    const metric = await env.manager?.registry.getSingleMetric('workqueue_depth')?.get();
    return (metric?.values ?? []).every((v) => v.value === 0);
  }

  const ourManager = (manager: string): boolean => manager.startsWith('machine-controller-manager-ts');
  /** gardener's field managers: the names of its two binaries, as the API server records them. */
  const gardenerManager = (manager: string): boolean =>
    manager === 'machine-controller-manager' || manager === 'machine-controller';

  /**
   * The objects in the namespace (and Nodes) that a field manager `by` accepts has written (since
   * `sinceMs`, to the second the API server records), as `<kind> <name>`.
   */
  async function writtenBy(by: (manager: string) => boolean, sinceMs = 0): Promise<string[]> {
    const since = Math.floor(sinceMs / 1000) * 1000;
    const wrote = (o: KubeObject): boolean =>
      (o.metadata.managedFields ?? []).some((f) => {
        const entry = f as { manager?: unknown; time?: unknown };
        return by(String(entry.manager)) && Date.parse(String(entry.time)) >= since;
      });
    const out: string[] = [];
    for (const [kind, res] of [
      ['MachineDeployment', MachineDeploymentResource],
      ['MachineSet', MachineSetResource],
      ['Machine', MachineResource],
      ['MachineClass', MachineClassResource],
    ] as const) {
      for (const o of (await env.client.list(res, { namespace: NS })).items)
        if (wrote(o)) out.push(`${kind} ${o.metadata.name ?? ''}`);
    }
    for (const n of await env.nodes()) if (wrote(n)) out.push(`Node ${n.metadata.name ?? ''}`);
    return out;
  }

  /** Asserts for two lease durations that the leader stays the leader. */
  async function expectLeaderStays(leads: () => Promise<boolean>, what: string): Promise<void> {
    const end = Date.now() + 2 * LEASE_SECONDS * 1000;
    while (Date.now() < end) {
      expect(await leads(), what).to.equal(true);
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  async function startGardenerStack(): Promise<void> {
    gardenerMcm = await startGardenerMachineControllerManager(env.cp, NS, [
      ...gardenerLeaderElection,
      '--machine-safety-overshooting-period=5s',
    ]);
    await startGardenerSidecar();
  }

  async function startGardenerSidecar(): Promise<void> {
    gardenerSidecar = await startGardenerMachineController(
      env.cp,
      NS,
      [...gardenerLeaderElection, '--machine-safety-orphan-vms-period=5s'],
      {
        command: gardenerAwsMachineControllerPath(),
        env: { ...process.env, AWS_ENDPOINT_URL_EC2: proxy.endpoint },
      },
    );
  }

  /** Both gardener processes hold their Leases (gardener's identity is the host name). */
  async function gardenerLeads(): Promise<void> {
    for (const name of [MCM_LEASE, SIDECAR_LEASE]) {
      await until(
        `gardener holds the Lease ${name}`,
        async () => (await lease(name)).spec?.holderIdentity === hostname(),
        30_000,
      );
    }
  }

  async function startOurs(controllers?: ControllerName[]): Promise<void> {
    await env.startManager({
      leaderElect: true,
      leaderElectLeaseDurationMs: LEASE_SECONDS * 1000,
      leaderElectRenewDeadlineMs: RENEW_SECONDS * 1000,
      leaderElectRetryPeriodMs: RETRY_SECONDS * 1000,
      machineSafetyOrphanVmsPeriodMs: 3_000,
      ...(controllers === undefined ? {} : { controllers }),
    });
  }

  /**
   * Our manager leads and has gone over every object: the deployment and its sets reconciled,
   * every machine too and two orphan-collection passes over the cloud when it runs the machine
   * controller, nothing queued; then the settle period.
   */
  async function oursTookOver(machines: number, machineController: boolean): Promise<void> {
    await until('our manager leads', () => env.manager?.isLeading() === true, (LEASE_SECONDS + 10) * 1000);
    await until('our deployment and MachineSet controllers went over the fleet', async () => {
      const mcd = await env.client.get<MachineDeployment>(MachineDeploymentResource, APP, NS);
      return (
        (await reconciles('machinedeployment')) >= 1 &&
        (await reconciles('machineset')) >= 1 &&
        // Written by our deployment controller alone (gardener's has no such field).
        mcd.status?.labelSelector === `app=${APP}`
      );
    });
    if (machineController) {
      await until(
        'our machine controller went over every machine, two orphan passes over the cloud',
        async () => (await reconciles('machine')) >= machines && (await reconciles('safety-orphan-vms')) >= 2,
      );
    }
    await until('nothing queued', queuesEmpty);
    await new Promise((r) => setTimeout(r, SETTLE_MS));
  }

  /** Asserts that the handover since `before` left the fleet alone. */
  async function expectUntouched(before: Fleet, callsBefore: Record<string, number>): Promise<void> {
    expect(lifecycleCalls(), 'EC2 calls that start, stop or end an instance').to.deep.equal(callsBefore);
    const after = await fleet();
    expect(after.instances, 'instance ids and states').to.deep.equal(before.instances);
    expect(after.machineSets, 'MachineSets (name, uid)').to.deep.equal(before.machineSets);
    expect(after.machines, 'machines (name, uid, providerID, node)').to.deep.equal(before.machines);
    expect(after.nodes, 'nodes (name, uid, providerID)').to.deep.equal(before.nodes);
    for (const m of await env.machines(APP))
      expect(phaseOf(m), `phase of ${m.metadata.name ?? ''}`).to.equal(MachinePhase.Running);
  }

  /**
   * Asserts that the API server serves exactly the CRDs of a directory: each version's schema and
   * subresources as the files say (kubectl apply replaced the other set's fields, none is left).
   */
  async function expectServedCrds(dir: string): Promise<void> {
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.yaml'))) {
      const want = yaml.load(readFileSync(path.join(dir, file), 'utf8')) as CrdShape;
      const r = await env.cp.request(
        'GET',
        `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${want.metadata.name}`,
      );
      const served = r.body as CrdShape;
      const shape = (c: CrdShape): unknown =>
        c.spec.versions.map((v) => ({ name: v.name, schema: v.schema, subresources: v.subresources }));
      expect(shape(served), `${want.metadata.name} as served`).to.deep.equal(shape(want));
    }
  }

  async function stopGardenerMcm(): Promise<void> {
    await gardenerMcm?.stop(5_000);
    gardenerMcm = undefined;
  }

  async function stopGardenerSidecar(): Promise<void> {
    await gardenerSidecar?.stop(5_000);
    gardenerSidecar = undefined;
  }

  before(async function () {
    this.timeout(240_000);
    gardenerMachineControllerManagerPath();
    gardenerAwsMachineControllerPath();
    moto = await startMoto();
    proxy = new Ec2FaultProxy(moto.endpoint);
    // Our manager runs in this process: its AWS provider reads the SDK's endpoint variable.
    process.env.AWS_ENDPOINT_URL_EC2 = await proxy.start();
    env = await LifecycleEnv.start({ kwok: true, installCRDs: false });
    // gardener's CRDs as its release ships them, applied as its documentation says.
    await applyCrdDirectory(env.cp, gardenerCrdDir());
    cloud = await provisionCloud(moto.endpoint);
    kubelet = new Ec2KubeletSimulator({
      endpoint: moto.endpoint,
      region: REGION,
      clusterTag: CLUSTER_TAG,
      client: env.client,
      // gardener's machine controller takes a Node that registers before CreateMachine returned
      // for a stale one; real instances boot for longer than this.
      bootDelayMs: 2_000,
    });
    kubelet.start();
    await applySampleClass(env.client, cloud, NS, 'gaws');
  });

  after(async () => {
    await env.stopManager();
    await stopGardenerMcm();
    await stopGardenerSidecar();
    await kubelet.stop();
    cloud.ec2.destroy();
    cloud.iam.destroy();
    await env.stop();
    await proxy.stop();
    await moto.stop();
    if (savedEndpoint === undefined) delete process.env.AWS_ENDPOINT_URL_EC2;
    else process.env.AWS_ENDPOINT_URL_EC2 = savedEndpoint;
  });

  describe('A: gardener → ours → gardener', () => {
    let before: Fleet;
    let callsBefore: Record<string, number>;

    it('gardener’s stack runs a MachineDeployment of 3: Running machines, Ready nodes, 3 instances; each process holds its own Lease', async () => {
      await startGardenerStack();
      await gardenerLeads();
      await env.createDeployment(APP, 3, 'gaws');
      await settled(3);
      await expectServedCrds(gardenerCrdDir());
      expect(await writtenBy(ourManager), 'objects our manager wrote').to.deep.equal([]);
    });

    it('our manager started while gardener’s MCM holds the Lease machine-controller-manager waits and writes nothing', async () => {
      // Step 1 of the switch: gardener's machine-controller stops. Nothing takes its Lease.
      await stopGardenerSidecar();
      // Step 2: our CRDs over gardener's (the objects stay; the schema is ours).
      await applyCrdDirectory(env.cp, OUR_CRDS, { serverSide: true });
      await expectServedCrds(OUR_CRDS);
      before = await fleet();
      callsBefore = lifecycleCalls();
      // Step 3 done too early: our manager starts while gardener's MCM still runs.
      await startOurs();
      await expectLeaderStays(
        async () =>
          env.manager?.isLeading() === false && (await lease(MCM_LEASE)).spec?.holderIdentity === hostname(),
        'gardener’s MCM keeps the Lease, ours does not lead',
      );
      expect((await lease(MCM_LEASE)).spec?.holderIdentity, 'holder of the Lease').to.equal(hostname());
      expect(await writtenBy(ourManager), 'objects our manager wrote').to.deep.equal([]);
      expect(lifecycleCalls()).to.deep.equal(callsBefore);
    });

    it('gardener’s MCM stops: ours takes the Lease and the fleet as it is (no instance started or stopped, the same MachineSet, machines and nodes)', async () => {
      await stopGardenerMcm();
      await oursTookOver(3, true);
      expect((await lease(MCM_LEASE)).spec?.holderIdentity).to.match(new RegExp(`^${hostname()}_`));
      await expectUntouched(before, callsBefore);
      // It did look at the cloud and write to the objects: the check above could have failed.
      expect(proxy.calls.get('DescribeInstances') ?? 0, 'DescribeInstances calls').to.be.greaterThan(0);
      expect(await writtenBy(ourManager), 'objects our manager wrote').to.include(`MachineDeployment ${APP}`);
    });

    it('ours scales 3→4 (one new instance, the machine Running) and 4→3 (one instance terminated)', async () => {
      const old = (await env.machines(APP)).map((m) => m.metadata.name ?? '');
      const sets = (await fleet()).machineSets;
      await env.scale(APP, 4);
      const ms = await settled(4);
      const added = ms.filter((m) => !old.includes(m.metadata.name ?? ''));
      expect(added, 'new machines').to.have.length(1);
      expect(added[0]?.spec?.providerID ?? '').to.match(/^aws:\/\/\/eu-west-1\/i-/);
      // The instances of the 4 machines: one of them must go, and no other. (Instances terminated
      // before, in gardener's phase, are not counted.)
      const ofFour = new Set(ms.map((m) => instanceIdOf(m.spec?.providerID ?? '')));
      await env.scale(APP, 3);
      await settled(3);
      let seen = '';
      await until('the removed machine’s instance terminated', async () => {
        const all = await taggedInstances(cloud.ec2);
        seen = all
          .map((i) => `${i.InstanceId ?? ''} ${i.State?.Name ?? ''} Name=${tagOf(i, 'Name') ?? ''}`)
          .join('; ');
        const mine = all.filter((i) => ofFour.has(i.InstanceId ?? ''));
        const others = all.filter((i) => !ofFour.has(i.InstanceId ?? '') && i.State?.Name !== 'terminated');
        if (others.length > 0) expect.fail(`an instance started by the scale-down: ${seen}`);
        return mine.length === 4 && mine.filter((i) => i.State?.Name === 'terminated').length === 1;
      }).catch((err: unknown) => {
        throw new Error(`${err instanceof Error ? err.message : String(err)} (instances: ${seen})`);
      });
      expect((await fleet()).machineSets, 'MachineSets').to.deep.equal(sets);
    });

    it('back: gardener’s MCM started while ours leads waits; ours stops, gardener’s stack runs on our CRDs and takes over without starting or stopping an instance, then scales to zero', async () => {
      before = await fleet();
      callsBefore = lifecycleCalls();
      // Started too early: gardener's MCM campaigns for the Lease our manager holds.
      const started = Date.now();
      gardenerMcm = await startGardenerMachineControllerManager(env.cp, NS, [
        ...gardenerLeaderElection,
        '--machine-safety-overshooting-period=5s',
      ]);
      await expectLeaderStays(
        async () =>
          env.manager?.isLeading() === true &&
          (await lease(MCM_LEASE)).spec?.holderIdentity?.startsWith(`${hostname()}_`) === true,
        'ours keeps the Lease',
      );
      expect(
        await writtenBy(gardenerManager, started),
        'objects gardener wrote while ours led',
      ).to.deep.equal([]);
      await env.stopManager();
      const describes = proxy.calls.get('DescribeInstances') ?? 0;
      await startGardenerSidecar();
      await gardenerLeads();
      // gardener's orphan collection (every 5 s) has looked at the cloud twice.
      await until(
        'gardener’s machine-controller looked at the cloud',
        () => (proxy.calls.get('DescribeInstances') ?? 0) >= describes + 2,
        30_000,
      );
      await new Promise((r) => setTimeout(r, SETTLE_MS));
      await expectUntouched(before, callsBefore);
      await expectServedCrds(OUR_CRDS);

      await env.scale(APP, 0);
      await until('no machine left', async () => (await env.machines(APP)).length === 0, 120_000);
      await until('no live instance left', async () => (await live()).length === 0, 60_000);
      await until('no node left', async () => (await env.nodes()).length === 0, 30_000);
      // gardener's writes since it started are seen: the check above could have failed.
      expect(await writtenBy(gardenerManager, started), 'objects gardener wrote').to.include(
        `MachineDeployment ${APP}`,
      );
    });
  });

  describe('B: gardener → ours beside gardener’s AWS machine-controller → ours alone', () => {
    let before: Fleet;
    let callsBefore: Record<string, number>;

    it('gardener’s CRDs re-applied over ours, gardener’s stack scales the fleet 0→3', async () => {
      await applyCrdDirectory(env.cp, gardenerCrdDir());
      await expectServedCrds(gardenerCrdDir());
      await env.scale(APP, 3);
      await settled(3);
    });

    it('gardener’s stack stops; ours runs machineset,machinedeployment,safety beside gardener’s AWS machine-controller (as our chart’s sidecar runs it): no instance started or stopped, the same MachineSet and machines', async () => {
      // gardener's Deployment scaled to zero stops both of its containers.
      await stopGardenerMcm();
      await stopGardenerSidecar();
      await applyCrdDirectory(env.cp, OUR_CRDS, { serverSide: true });
      await expectServedCrds(OUR_CRDS);
      before = await fleet();
      callsBefore = lifecycleCalls();
      const describes = proxy.calls.get('DescribeInstances') ?? 0;
      // Our chart with machineController.sidecar.enabled: our manager with the split, gardener's
      // machine-controller beside it with its own flags and Lease.
      await startGardenerSidecar();
      await startOurs(['machineset', 'machinedeployment', 'safety']);
      await until(
        'gardener’s machine-controller looked at the cloud',
        () => (proxy.calls.get('DescribeInstances') ?? 0) >= describes + 2,
        30_000,
      );
      await oursTookOver(3, false);
      expect(await reconciles('machine'), 'our machine controller does not run').to.equal(0);
      expect((await lease(SIDECAR_LEASE)).spec?.holderIdentity, 'the sidecar holds its Lease').to.equal(
        hostname(),
      );
      expect((await lease(MCM_LEASE)).spec?.holderIdentity, 'ours holds the other').to.match(
        new RegExp(`^${hostname()}_`),
      );
      await expectUntouched(before, callsBefore);
    });

    it('gardener’s machine-controller stops; ours runs every controller with its AWS provider: no instance started or stopped; then scales 3→4→0', async () => {
      await stopGardenerSidecar();
      await env.stopManager();
      await startOurs();
      await oursTookOver(3, true);
      await expectUntouched(before, callsBefore);

      const old = (await env.machines(APP)).map((m) => m.metadata.name ?? '');
      await env.scale(APP, 4);
      const ms = await settled(4);
      expect(
        ms.filter((m) => !old.includes(m.metadata.name ?? '')),
        'new machines',
      ).to.have.length(1);
      expect((await fleet()).machineSets, 'MachineSets').to.deep.equal(before.machineSets);
      await env.scale(APP, 0);
      await until('no machine left', async () => (await env.machines(APP)).length === 0, 120_000);
      await until('no live instance left', async () => (await live()).length === 0, 60_000);
      await until('no node left', async () => (await env.nodes()).length === 0, 30_000);
    });
  });
});
