// The stock cluster-autoscaler's price expander and per-group options against our externalgrpc
// server, with a real kube-apiserver, kube-scheduler, kube-controller-manager and kwok running the
// pods: the expander scales the cheaper of two equal groups (alone and behind least-waste), a group
// whose MachineDeployment shortens scale-down-unneeded-time loses its idle node while the other
// keeps its own, and a booting node of a group that answers options (which zeroes the
// autoscaler's MaxNodeStartupTime, kubernetes/autoscaler#10245) is not counted unready in its
// group while it boots, is not deleted and is not scaled up for again. The autoscaler's status
// ConfigMap, read on every loop, shows what it counted.

import { mkdirSync } from 'node:fs';
import path from 'node:path';

import { expect } from 'chai';
import yaml from 'js-yaml';

import { parseGoDuration } from '../../lib/api/duration.js';
import {
  MachineClassResource,
  MachineDeploymentResource,
  MachineResource,
  type Machine,
  type MachineDeployment,
} from '../../lib/api/types.js';
import { GroupAnnotation } from '../../lib/autoscaler/groups.js';
import { OptionAnnotation } from '../../lib/autoscaler/options.js';
import { NOTIONAL_RATES } from '../../lib/autoscaler/pricing.js';
import type { KubeClient } from '../../lib/kube/client.js';
import { isNotFound } from '../../lib/kube/errors.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { ConfigMap, Node, Pod } from '../../lib/kube/types.js';
import { requireAutoscaler, startAutoscaler, type Autoscaler } from '../harness/autoscaler.js';
import { createMtlsBundle, writeMtlsBundle, type MtlsFiles } from '../harness/certs.js';
import { AppsDeployments, nodeFillingDeployment } from '../harness/workload.js';
import { LifecycleEnv, NS, nodeTemplate, phaseOf } from '../integration/env/lifecycle.js';
import { until } from '../integration/env/until.js';
import { watchEvents } from '../integration/env/watch.js';

/** The price scenarios run on the newest wire shape and on the 1.33/1.34 one. */
const PRICE_VERSIONS = ['1.36.1', '1.34.5'];
const OPTIONS_VERSION = '1.36.1';
const BOOT_DELAY = '2s';
/** Long enough to read the autoscaler's view of a registered, not-yet-Ready node many times. */
const SLOW_BOOT_DELAY = '60s';
/** Where the harness runs the autoscaler (--namespace) and its status ConfigMap's default name. */
const STATUS_NAMESPACE = 'kube-system';
const STATUS_CONFIGMAP = 'cluster-autoscaler-status';
/** The taint the autoscaler reads as not ready (kube_util.GetNodeReadiness), whatever its effect. */
const NOT_READY_TAINT = 'node.kubernetes.io/not-ready';

const isReady = (n: Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
const running = (p: Pod): boolean => p.spec?.nodeName !== undefined && p.status?.phase === 'Running';
const nodeOf = (m: Machine): string => m.metadata.labels?.node ?? m.metadata.name ?? '';

function seconds(since: number): string {
  return `${((Date.now() - since) / 1000).toFixed(1)}s`;
}

/** Lines of a klog log that contain `text`. */
function linesWith(log: string, text: string): string[] {
  return log.split('\n').filter((l) => l.includes(text));
}

/**
 * The scale-ups a cluster-autoscaler log reports, as `<group> <new size>` (the executor's own lines,
 * not the event the logging event sink repeats them in).
 */
function scaleUpsIn(log: string): string[] {
  return [...log.matchAll(/\] Scale-up: setting group (\S+) size to (\d+)$/gm)].map((m) => `${m[1]} ${m[2]}`);
}

/** One group's (or the cluster's) node counts in the autoscaler's status ConfigMap. */
interface NodeCounts {
  registered: number;
  ready: number;
  notStarted: number;
  unready: number;
  unregistered: number;
  longUnregistered: number;
}

interface StatusNodeCounts {
  registered?: { total?: number; ready?: number; notStarted?: number; unready?: { total?: number } };
  unregistered?: number;
  longUnregistered?: number;
}

interface AutoscalerStatus {
  time?: string;
  clusterWide?: { health?: { status?: string; nodeCounts?: StatusNodeCounts } };
  nodeGroups?: {
    name?: string;
    health?: { nodeCounts?: StatusNodeCounts; cloudProviderTarget?: number };
  }[];
}

function countsOf(c: StatusNodeCounts | undefined): NodeCounts {
  return {
    registered: c?.registered?.total ?? 0,
    ready: c?.registered?.ready ?? 0,
    notStarted: c?.registered?.notStarted ?? 0,
    unready: c?.registered?.unready?.total ?? 0,
    unregistered: c?.unregistered ?? 0,
    longUnregistered: c?.longUnregistered ?? 0,
  };
}

const showCounts = (c: NodeCounts): string =>
  `registered=${c.registered} ready=${c.ready} notStarted=${c.notStarted} unready=${c.unready} unregistered=${c.unregistered} longUnregistered=${c.longUnregistered}`;

/** What one loop of the autoscaler wrote for a group and for the whole cluster. */
interface StatusSample {
  /** The loop's time (ms since the epoch), when it read the cluster. */
  loopAt: number;
  group: NodeCounts;
  target: number;
  cluster: NodeCounts;
  health: string;
}

/** The status's time, Go's "2006-01-02 15:04:05.999999999 -0700 MST", in ms since the epoch. */
function statusTime(text: string): number {
  const m = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(\.\d+)? ([+-]\d\d)(\d\d)/.exec(text);
  if (m === null) throw new Error(`status time "${text}" is not in Go's format`);
  const ms = (m[3] ?? '.0').slice(0, 4).padEnd(4, '0');
  return Date.parse(`${m[1] ?? ''}T${m[2] ?? ''}${ms}${m[4] ?? ''}:${m[5] ?? ''}`);
}

describe('cluster-autoscaler e2e: prices and per-group options (real autoscaler, kube-scheduler, kwok)', function () {
  this.timeout(900_000);
  let env: LifecycleEnv;
  let client: KubeClient;
  let tls: MtlsFiles;
  /** The running scenario: its name prefix and autoscaler, cleaned up after each test. */
  let prefix: string | undefined;
  let ca: Autoscaler | undefined;

  const pods = async (app: string): Promise<Pod[]> =>
    (await client.list<Pod>(CoreResources.pods, { namespace: NS, labelSelector: `app=${app}` })).items.filter(
      (p) => p.metadata.deletionTimestamp === undefined,
    );
  const ofPrefix = <T extends { metadata: { name?: string } }>(items: T[], p: string): T[] =>
    items.filter((o) => (o.metadata.name ?? '').startsWith(`${p}-`));

  /** What the cluster looks like, printed when a scenario times out. */
  async function dump(p: string): Promise<string> {
    const lines: string[] = [];
    for (const m of ofPrefix(await env.machines(), p)) {
      lines.push(
        `machine ${m.metadata.name ?? ''} class=${m.spec?.class?.name ?? ''} phase=${phaseOf(m)} deleting=${String(m.metadata.deletionTimestamp !== undefined)} op=${m.status?.lastOperation?.description ?? ''}`,
      );
    }
    const mcds = (await client.list<MachineDeployment>(MachineDeploymentResource, { namespace: NS })).items;
    for (const d of ofPrefix(mcds, p)) {
      lines.push(
        `mcd ${d.metadata.name ?? ''} replicas=${String(d.spec?.replicas)} annotations=${JSON.stringify(d.metadata.annotations)}`,
      );
    }
    for (const pod of await pods(`${p}-pods`)) {
      lines.push(
        `pod ${pod.metadata.name ?? ''} node=${pod.spec?.nodeName ?? ''} phase=${pod.status?.phase ?? ''}`,
      );
    }
    for (const n of await env.nodes()) {
      lines.push(
        `node ${n.metadata.name ?? ''} ready=${String(isReady(n))} taints=${JSON.stringify(n.spec?.taints ?? [])}`,
      );
    }
    if (ca !== undefined) {
      // At --v=5 every gRPC call is logged; the decisions are the other lines.
      const tail = ca
        .log()
        .split('\n')
        .filter((l) => !l.includes('Performing gRPC call'))
        .slice(-60);
      lines.push('--- cluster-autoscaler log (tail, without gRPC calls)', ...tail);
    }
    return lines.join('\n');
  }

  /** until(), with the cluster state in the error when it times out. */
  async function waitFor<T>(
    what: string,
    p: string,
    fn: () => Promise<T | undefined | false>,
    timeoutMs: number,
  ): Promise<T> {
    try {
      return await until(what, fn, timeoutMs);
    } catch (err) {
      throw new Error(`${err instanceof Error ? err.message : String(err)}\n${await dump(p)}`, {
        cause: err,
      });
    }
  }

  /** A MachineDeployment served as a node group, its nodes labelled pool=<pool>. */
  async function createGroup(
    name: string,
    className: string,
    replicas: number,
    opts: { min: number; max: number; pool: string; annotations?: Record<string, string> },
  ): Promise<void> {
    await env.createDeployment(
      name,
      replicas,
      className,
      {},
      { nodeTemplate: { metadata: { labels: { pool: opts.pool } } } },
    );
    await client.patch(
      MachineDeploymentResource,
      name,
      {
        metadata: {
          annotations: {
            [GroupAnnotation.MinSize]: String(opts.min),
            [GroupAnnotation.MaxSize]: String(opts.max),
            ...opts.annotations,
          },
        },
      },
      { type: 'merge', namespace: NS },
    );
  }

  async function startCa(
    version: string,
    flags: Record<string, string | number | boolean | null>,
    verbosity?: number,
  ): Promise<Autoscaler> {
    ca = await startAutoscaler({
      version,
      controlPlane: env.cp,
      address: `127.0.0.1:${env.manager?.grpcPort ?? 0}`,
      tls: { certFile: tls.clientCertFile, keyFile: tls.clientKeyFile, caFile: tls.caFile },
      grpcTimeout: '10s',
      flags,
      ...(verbosity === undefined ? {} : { verbosity }),
    });
    return ca;
  }

  /** Every value of a deployment's spec.replicas from now until stop (a watch, not a final read). */
  async function trackReplicas(name: string): Promise<{ seen: number[]; stop: () => Promise<void> }> {
    const seen: number[] = [];
    const record = (d: MachineDeployment): void => {
      seen.push(d.spec?.replicas ?? 0);
    };
    const stop = await watchEvents<MachineDeployment>(
      client,
      NS,
      MachineDeploymentResource,
      { fieldSelector: `metadata.name=${name}` },
      (ev) => {
        if (ev.type !== 'DELETED') record(ev.object);
      },
      (items) => {
        items.forEach(record);
      },
    );
    return { seen, stop };
  }

  before(async () => {
    env = await LifecycleEnv.start({ scheduler: true, controllerManager: true, kwok: true });
    client = env.client;
    const dir = path.join(env.cp.workDir, 'tls');
    mkdirSync(dir);
    tls = writeMtlsBundle(dir, createMtlsBundle());
    await env.startManager({
      grpcAddress: '127.0.0.1:0',
      grpcTlsCertFile: tls.serverCertFile,
      grpcTlsKeyFile: tls.serverKeyFile,
      grpcClientCaFile: tls.caFile,
      machineDrainTimeoutMs: 30_000,
    });
  });

  // Each scenario leaves no autoscaler, workload, group, machine or node behind: the next one
  // counts the cluster's nodes.
  afterEach(async () => {
    await ca?.stop();
    ca = undefined;
    const p = prefix;
    prefix = undefined;
    if (p === undefined) return;
    await client.delete(AppsDeployments, `${p}-pods`, { namespace: NS }).catch((err: unknown) => {
      if (!isNotFound(err)) throw err;
    });
    const mcds = (await client.list<MachineDeployment>(MachineDeploymentResource, { namespace: NS })).items;
    for (const d of ofPrefix(mcds, p)) {
      await client
        .delete(MachineDeploymentResource, d.metadata.name ?? '', { namespace: NS })
        .catch((err: unknown) => {
          if (!isNotFound(err)) throw err;
        });
    }
    await waitFor(
      `the machines and nodes of ${p} gone`,
      p,
      async () =>
        ofPrefix(await env.machines(), p).length === 0 && ofPrefix(await env.nodes(), p).length === 0,
      120_000,
    );
    for (const c of ofPrefix((await client.list(MachineClassResource, { namespace: NS })).items, p)) {
      await client
        .delete(MachineClassResource, c.metadata.name ?? '', { namespace: NS })
        .catch((err: unknown) => {
          if (!isNotFound(err)) throw err;
        });
    }
  });

  after(async () => {
    await env.stop();
  });

  /**
   * Groups of identical 4-CPU nodes at zero, priced as given (undefined: no price anywhere, so the
   * manager prices it notionally), and two pods of 1.5 CPUs that one node of any group holds: the
   * expander must raise `winner` to exactly 1 and leave every other group at 0, having scored
   * every group with the price the manager answers (one node for one hour).
   */
  async function priceScenario(
    version: string,
    expander: string,
    p: string,
    groups: { name: string; pricePerHour: number | undefined }[],
    winner: string,
  ): Promise<void> {
    requireAutoscaler(version);
    prefix = p;
    const t0 = Date.now();
    // Identical nodes (least-waste ties): only the price tells them apart.
    const shape = nodeTemplate({ capacity: { cpu: '4', memory: '8Gi', pods: '20' }, zone: `${p}-zone` });
    const seen = new Map<string, { seen: number[]; stop: () => Promise<void> }>();
    for (const g of groups) {
      const spec = g.pricePerHour === undefined ? {} : { pricePerHour: g.pricePerHour };
      await env.createClass(`${p}-${g.name}`, { bootDelay: BOOT_DELAY, ...spec }, { nodeTemplate: shape });
      await createGroup(`${p}-${g.name}`, `${p}-${g.name}`, 0, { min: 0, max: 4, pool: p });
      seen.set(g.name, await trackReplicas(`${p}-${g.name}`));
    }
    // --v=5: the price expander logs each option it scores.
    const autoscaler = await startCa(version, { expander }, 5);
    await client.create(
      AppsDeployments,
      nodeFillingDeployment({ name: `${p}-pods`, namespace: NS, pool: p, replicas: 2 }),
    );
    const scheduled = await waitFor(
      'both pods running',
      p,
      async () => {
        const ps = await pods(`${p}-pods`);
        return ps.length === 2 && ps.every(running) ? ps : undefined;
      },
      180_000,
    );
    // A few more loops (1 s each) in which a late scale-up of another group would show.
    await new Promise((r) => setTimeout(r, 3_000));
    for (const t of seen.values()) await t.stop();
    console.log(`      [${version} ${expander}] scale-up of the ${winner} group: ${seconds(t0)}`);

    const log = autoscaler.log();
    for (const g of groups) {
      const line = linesWith(log, `Price expander for ${NS}/${p}-${g.name}: `)[0] ?? '(none)';
      console.log(`        ${line.slice(line.indexOf('Price expander'))}`);
    }
    for (const g of groups) {
      const replicas = seen.get(g.name)?.seen ?? [];
      expect(replicas, `the ${g.name} group's replicas, every value the watch saw`).to.not.be.empty;
      expect(Math.max(...replicas), `the ${g.name} group's highest replicas`).to.equal(
        g.name === winner ? 1 : 0,
      );
      if (g.name !== winner)
        expect((await env.machines(`${p}-${g.name}`)).length, `no machine of the ${g.name} group`).to.equal(
          0,
        );
      // Every option reached the price expander (behind least-waste: it tied them), priced as the
      // manager says: the class's price, or 4 vCPU and 8 GiB at the notional rates.
      const price = g.pricePerHour ?? 4 * NOTIONAL_RATES.perVcpuHour + 8 * NOTIONAL_RATES.perGiBHour;
      expect(log).to.contain(`Price expander for ${NS}/${p}-${g.name}: all_nodes_price=${price.toFixed(6)}`);
    }
    const winnerNodes = new Set((await env.machines(`${p}-${winner}`)).map(nodeOf));
    for (const pod of scheduled)
      expect(winnerNodes.has(pod.spec?.nodeName ?? ''), `pod on a node of the ${winner} group`).to.equal(
        true,
      );
    expect(scaleUpsIn(log), 'the scale-ups').to.deep.equal([`${NS}/${p}-${winner} 1`]);
    for (const bad of [
      'Failed to calculate node price',
      'Failed to calculate pod price',
      'Failed to get price for stabilization pod',
      'Expander filtered out all options',
    ])
      expect(linesWith(log, bad), `the autoscaler logged "${bad}"`).to.deep.equal([]);
  }

  describe('the price expander', () => {
    for (const version of PRICE_VERSIONS) {
      for (const [i, expander] of ['price', 'least-waste,price'].entries()) {
        it(`${version}, --expander=${expander}: scales up the group whose nodes cost 1 per hour and never the one at 3`, async () => {
          const p = `pr${version.replace(/\./g, '')}${i}`;
          await priceScenario(
            version,
            expander,
            p,
            [
              { name: 'cheap', pricePerHour: 1 },
              { name: 'dear', pricePerHour: 3 },
            ],
            'cheap',
          );
        });
      }
    }

    it(`${PRICE_VERSIONS[0] ?? ''}, --expander=price: scales up the getting-started group (a virtual class with no price and no nodeTemplate) at the notional price of its node`, async () => {
      const version = PRICE_VERSIONS[0] ?? '';
      requireAutoscaler(version);
      const p = 'prn';
      prefix = p;
      const t0 = Date.now();
      // The getting-started class: no pricePerHour, no nodeTemplate; its VMs are the virtual
      // provider's default 2 vCPU and 4 GiB, so the autoscaler builds the template from a node.
      await env.createClass(`${p}-virtual`, { bootDelay: BOOT_DELAY });
      await createGroup(`${p}-workers`, `${p}-virtual`, 1, { min: 1, max: 4, pool: p });
      await waitFor(
        'the first node Ready',
        p,
        async () => {
          const names = new Set((await env.machines(`${p}-workers`)).map(nodeOf));
          return (await env.nodes()).some((n) => names.has(n.metadata.name ?? '') && isReady(n));
        },
        120_000,
      );
      const workers = await trackReplicas(`${p}-workers`);
      const autoscaler = await startCa(version, { expander: 'price' }, 5);
      // Two pods of 1.5 CPUs: one fits the first node, the other needs a second one.
      await client.create(
        AppsDeployments,
        nodeFillingDeployment({ name: `${p}-pods`, namespace: NS, pool: p, replicas: 2 }),
      );
      await waitFor(
        'both pods running',
        p,
        async () => {
          const ps = await pods(`${p}-pods`);
          return ps.length === 2 && ps.every(running) ? ps : undefined;
        },
        180_000,
      );
      await workers.stop();
      console.log(`      [${version} price] scale-up of the unpriced group: ${seconds(t0)}`);
      const log = autoscaler.log();
      const line = linesWith(log, `Price expander for ${NS}/${p}-workers: `)[0] ?? '(none)';
      console.log(`        ${line.slice(line.indexOf('Price expander'))}`);
      expect(Math.max(...workers.seen), 'the group raised to exactly 2').to.equal(2);
      expect(scaleUpsIn(log), 'the scale-ups').to.deep.equal([`${NS}/${p}-workers 2`]);
      const notional = 2 * NOTIONAL_RATES.perVcpuHour + 4 * NOTIONAL_RATES.perGiBHour;
      expect(log).to.contain(`Price expander for ${NS}/${p}-workers: all_nodes_price=${notional.toFixed(6)}`);
      for (const bad of [
        'Failed to calculate node price',
        'Failed to calculate pod price',
        'Expander filtered out all options',
      ])
        expect(linesWith(log, bad), `the autoscaler logged "${bad}"`).to.deep.equal([]);
    });

    it(`${PRICE_VERSIONS[0] ?? ''}, --expander=price: a priced group cheaper than an unpriced one's notional price wins`, async () => {
      await priceScenario(
        PRICE_VERSIONS[0] ?? '',
        'price',
        'prm',
        [
          { name: 'unpriced', pricePerHour: undefined },
          { name: 'cheap', pricePerHour: 0.1 },
        ],
        'cheap',
      );
    });
  });

  describe(`per-group options (cluster-autoscaler ${OPTIONS_VERSION})`, () => {
    it("removes the idle node of the group whose annotation shortens scale-down-unneeded-time to 10s, and keeps the other group's under the flag's 2m", async () => {
      requireAutoscaler(OPTIONS_VERSION);
      const p = 'opt';
      prefix = p;
      await env.createClass(
        `${p}-cls`,
        { bootDelay: BOOT_DELAY },
        { nodeTemplate: nodeTemplate({ capacity: { cpu: '2', memory: '4Gi', pods: '20' } }) },
      );
      await createGroup(`${p}-tuned`, `${p}-cls`, 1, {
        min: 0,
        max: 2,
        pool: p,
        annotations: { [OptionAnnotation.ScaleDownUnneededTime]: '10s' },
      });
      await createGroup(`${p}-plain`, `${p}-cls`, 1, { min: 0, max: 2, pool: p });
      const [tunedNode, plainNode] = await waitFor(
        'one Running machine with a Ready node in each group',
        p,
        async () => {
          const nodes = await env.nodes();
          const names: string[] = [];
          for (const g of ['tuned', 'plain']) {
            const ms = await env.machines(`${p}-${g}`);
            const m = ms[0];
            if (ms.length !== 1 || m === undefined || phaseOf(m) !== 'Running') return undefined;
            const n = nodes.find((x) => x.metadata.name === nodeOf(m));
            if (n === undefined || !isReady(n)) return undefined;
            names.push(nodeOf(m));
          }
          return names;
        },
        60_000,
      );
      if (tunedNode === undefined || plainNode === undefined) throw new Error('no nodes');
      const plain = await trackReplicas(`${p}-plain`);
      const plainDeleted: string[] = [];
      const stopMachines = await watchEvents<Machine>(
        client,
        NS,
        MachineResource,
        { labelSelector: `app=${p}-plain` },
        (ev) => {
          if (ev.type === 'DELETED' || ev.object.metadata.deletionTimestamp !== undefined)
            plainDeleted.push(ev.object.metadata.name ?? '');
        },
      );
      const t0 = Date.now();
      // The harness's scale-down timers are seconds (delay after add 5s, recheck 5s); only the
      // unneeded time is long, and the tuned group's annotation shortens it for that group alone.
      const autoscaler = await startCa(OPTIONS_VERSION, { 'scale-down-unneeded-time': '2m' });
      await waitFor(
        "the tuned group's node removed",
        p,
        async () => {
          const d = await client.get<MachineDeployment>(MachineDeploymentResource, `${p}-tuned`, NS);
          return d.spec?.replicas === 0 && (await env.machines(`${p}-tuned`)).length === 0;
        },
        120_000,
      );
      const goneAfter = Date.now() - t0;
      console.log(`      [${OPTIONS_VERSION}] idle node of the tuned group removed: ${seconds(t0)}`);
      expect(goneAfter, "removed well before the flag's 2m").to.be.lessThan(90_000);
      const plainAtRemoval = await env.machines(`${p}-plain`);
      expect(plainAtRemoval.map(nodeOf), "the plain group's node when the tuned one was gone").to.deep.equal([
        plainNode,
      ]);
      // Still there 30 s on, unneeded by then for longer than the tuned group's 10s.
      await new Promise((r) => setTimeout(r, 30_000));
      await plain.stop();
      await stopMachines();
      const log = autoscaler.log();
      expect(log).to.contain(`Scale-down: removing empty node "${tunedNode}"`);
      expect(linesWith(log, `Scale-down: removing`).filter((l) => l.includes(plainNode))).to.deep.equal([]);
      expect(plainDeleted, 'no machine of the plain group deleted').to.deep.equal([]);
      expect(Math.min(...plain.seen), "the plain group's replicas never went below 1").to.equal(1);
      const plainMachines = await env.machines(`${p}-plain`);
      expect(plainMachines.map(nodeOf)).to.deep.equal([plainNode]);
      expect(phaseOf(plainMachines[0] as Machine)).to.equal('Running');
      // The plain node was a scale-down candidate all along, just not for the 2m its group needs:
      // it is kept for its unneeded time, not for another reason.
      const unneededFor = linesWith(log, `${plainNode} was unneeded for `).map((l) =>
        parseGoDuration(l.slice(l.lastIndexOf(' ') + 1)),
      );
      expect(
        Math.max(0, ...unneededFor),
        'the autoscaler saw the plain node unneeded for longer than 10s',
      ).to.be.greaterThan(20_000);
    });

    // What the autoscaler's status ConfigMap showed in our runs (1 s loops, the booting node
    // NotReady for 60 s, about 60 loops):
    // - the group: registered=1 ready=1 unready=0 unregistered=1 in every loop of the boot; the
    //   booting node is not the group's until its machine joined, so MaxNodeStartupTime 0 never
    //   applies to it;
    // - cluster-wide: unready=1 in most loops of the boot, notStarted=1 in the others. For a node
    //   of no group the autoscaler keeps the startup time of the node it looked at before
    //   (clusterstate.go updateReadinessStats, 1.36.1 L723-L731): after the group's running node,
    //   0. Health stays Healthy here (1 unready <= --ok-total-unready-count 3); more than 3 such
    //   nodes booting at once, and more than 45% of the cluster's nodes, would make the cluster
    //   Unhealthy and stop the autoscaler until they are Ready;
    // - right after the node turned Ready, the node lifecycle controller removes its
    //   node.kubernetes.io/not-ready NoExecute taint only at its next pass (--node-monitor-period,
    //   2s here, 5s by default), and the autoscaler counts a node with that taint as not ready:
    //   with startup time 0, Unready. Counted as the group's in that gap (the machine is Running
    //   once the Ready condition is True), the group showed unready=1 for one or two loops in 6 of 8
    //   runs; the server now keeps such a node out of its group until the taint is gone (justReady
    //   in lib/autoscaler/instances.ts), and the group shows no unready loop at all. kwok, when its
    //   node-initialize stage races the virtual cloud's Ready write and lands last, dates the Ready
    //   transition back to the node's creation (60 s before): the hold counts from the machine's
    //   join as well (1 run in 9 showed one unready loop before it did).
    it('never counts a booting node of a group that answers options (#10245) unready in its group, keeps it and scales up once', async () => {
      requireAutoscaler(OPTIONS_VERSION);
      const p = 'boot';
      prefix = p;
      await env.createClass(
        `${p}-cls`,
        { bootDelay: BOOT_DELAY },
        { nodeTemplate: nodeTemplate({ capacity: { cpu: '2', memory: '4Gi', pods: '20' } }) },
      );
      // Options answered for the group (the annotation), so the autoscaler's MaxNodeStartupTime is
      // 0 for it. One node already runs (min 1), so the cluster-wide count has a node of the group
      // to carry that 0 over from.
      const group = `${NS}/${p}-grp`;
      await createGroup(`${p}-grp`, `${p}-cls`, 1, {
        min: 1,
        max: 4,
        pool: p,
        annotations: { [OptionAnnotation.ScaleDownUnneededTime]: '10m' },
      });
      const runningNode = await waitFor(
        'the first machine Running with a Ready node, the only node of the cluster',
        p,
        async () => {
          const ms = await env.machines(`${p}-grp`);
          const m = ms[0];
          const nodes = await env.nodes();
          if (ms.length !== 1 || m === undefined || phaseOf(m) !== 'Running') return undefined;
          return nodes.length === 1 && nodes[0] !== undefined && isReady(nodes[0]) ? nodeOf(m) : undefined;
        },
        60_000,
      );
      // From now on the class's VMs boot for 60 s (read when a VM is created; no rollout).
      await client.patch(
        MachineClassResource,
        `${p}-cls`,
        { providerSpec: { bootDelay: SLOW_BOOT_DELAY } },
        { type: 'merge', namespace: NS },
      );

      const replicas = await trackReplicas(`${p}-grp`);
      const deleted: string[] = [];
      const stopMachines = await watchEvents<Machine>(
        client,
        NS,
        MachineResource,
        { labelSelector: `app=${p}-grp` },
        (ev) => {
          if (ev.type === 'DELETED' || ev.object.metadata.deletionTimestamp !== undefined)
            deleted.push(`machine ${ev.object.metadata.name ?? ''}`);
        },
      );
      /** Per node: when the watch saw it, Ready, and Ready without a not-ready taint. */
      const nodeSeen = new Map<string, { added: number; readyAt?: number; untaintedAt?: number }>();
      const stopNodes = await watchEvents<Node>(client, '', CoreResources.nodes, {}, (ev) => {
        const name = ev.object.metadata.name ?? '';
        if (ev.type === 'DELETED') {
          deleted.push(`node ${name}`);
          return;
        }
        const seen = nodeSeen.get(name) ?? { added: Date.now() };
        if (isReady(ev.object)) {
          seen.readyAt ??= Date.now();
          if (!(ev.object.spec?.taints ?? []).some((t) => t.key === NOT_READY_TAINT))
            seen.untaintedAt ??= Date.now();
        }
        nodeSeen.set(name, seen);
      });
      // Every loop writes the status ConfigMap: the watch sees the readiness counts of each loop.
      const samples: StatusSample[] = [];
      const stopStatus = await watchEvents<ConfigMap>(
        client,
        STATUS_NAMESPACE,
        CoreResources.configMaps,
        { fieldSelector: `metadata.name=${STATUS_CONFIGMAP}` },
        (ev) => {
          const text = ev.object.data?.status;
          if (ev.type === 'DELETED' || text === undefined) return;
          const status = yaml.load(text) as AutoscalerStatus;
          const g = status.nodeGroups?.find((x) => x.name === group);
          if (g === undefined) return;
          samples.push({
            loopAt: statusTime(status.time ?? ''),
            group: countsOf(g.health?.nodeCounts),
            target: g.health?.cloudProviderTarget ?? 0,
            cluster: countsOf(status.clusterWide?.health?.nodeCounts),
            health: status.clusterWide?.health?.status ?? '',
          });
        },
      );

      const t0 = Date.now();
      // --v=5 logs the startup time the autoscaler applies to each node. The provision time is
      // longer than the boot (the booting machine is an unregistered instance until it joins), and
      // so is the startup time of groups without options: only the trap could count the booting
      // node unready.
      const autoscaler = await startCa(
        OPTIONS_VERSION,
        { 'max-node-provision-time': '3m', 'max-node-startup-time': '5m' },
        5,
      );
      // Two pods of 1.5 CPUs on 2-CPU nodes: one goes to the running node, the other needs a new one.
      await client.create(
        AppsDeployments,
        nodeFillingDeployment({ name: `${p}-pods`, namespace: NS, pool: p, replicas: 2 }),
      );
      const booting = await waitFor(
        'a second machine whose node registered NotReady',
        p,
        async () => {
          const ms = (await env.machines(`${p}-grp`)).map(nodeOf).filter((n) => n !== runningNode);
          const n = ms[0];
          return n !== undefined && nodeSeen.has(n) && nodeSeen.get(n)?.readyAt === undefined ? n : undefined;
        },
        60_000,
      );
      await waitFor(
        'both pods running and the booting node Ready without its not-ready taint',
        p,
        async () => {
          const ps = await pods(`${p}-pods`);
          return ps.length === 2 && ps.every(running) && nodeSeen.get(booting)?.untaintedAt !== undefined;
        },
        150_000,
      );
      // A few more loops after the node joined its group.
      await new Promise((r) => setTimeout(r, 3_000));
      await replicas.stop();
      await stopMachines();
      await stopNodes();
      await stopStatus();
      const seen = nodeSeen.get(booting);
      const readyAt = seen?.readyAt ?? 0;
      const untaintedAt = seen?.untaintedAt ?? 0;
      const log = autoscaler.log();

      // The boot in the autoscaler's view: two registered nodes, one Ready, one of them the group's.
      const boot = samples.filter((s) => s.cluster.registered === 2 && s.cluster.ready === 1);
      const beforeJoin = boot.filter((s) => s.group.registered === 1);
      const groupUnready = samples.filter((s) => s.group.unready > 0);
      const startupOf = (node: string): Record<string, number> => {
        const byValue: Record<string, number> = {};
        for (const l of linesWith(log, `Node ${node}: using maxNodeStartupTime = `)) {
          const v = l.slice(l.lastIndexOf(' ') + 1);
          byValue[v] = (byValue[v] ?? 0) + 1;
        }
        return byValue;
      };
      const distinct = (xs: string[]): string => [...new Set(xs)].join(' | ');
      console.log(
        `      [${OPTIONS_VERSION}] booting node NotReady for ${((readyAt - (seen?.added ?? 0)) / 1000).toFixed(1)}s, its not-ready taint gone ${untaintedAt - readyAt}ms after Ready; pods running after ${seconds(t0)}`,
      );
      console.log(
        `      status: ${samples.length} loops, ${beforeJoin.length} while the node booted outside its group: group ${distinct(beforeJoin.map((s) => showCounts(s.group)))}`,
      );
      console.log(
        `      cluster-wide while booting: unready=1 in ${beforeJoin.filter((s) => s.cluster.unready > 0).length}, notStarted=1 in ${beforeJoin.filter((s) => s.cluster.notStarted > 0).length}; health ${distinct(samples.map((s) => s.health))}`,
      );
      console.log(
        `      group unready>0 in ${groupUnready.length} loop(s), at ${groupUnready.map((s) => `${s.loopAt - readyAt}ms`).join(', ')} after Ready: ${distinct(groupUnready.map((s) => showCounts(s.group)))}`,
      );
      console.log(
        `      maxNodeStartupTime applied: running node ${JSON.stringify(startupOf(runningNode))}, booting node ${JSON.stringify(startupOf(booting))}`,
      );

      expect(
        readyAt - (seen?.added ?? 0),
        'the node was NotReady for most of the boot delay',
      ).to.be.greaterThan(45_000);
      expect(beforeJoin.length, 'loops while the node booted outside its group').to.be.greaterThan(20);
      // The trap is live: the group's own node is judged with a startup time of 0.
      expect(
        startupOf(runningNode)['0s'] ?? 0,
        'the group answers options: startup time 0',
      ).to.be.greaterThan(0);
      for (const s of beforeJoin) {
        // Not the group's yet: the group waits for its machine as an upcoming (unregistered)
        // instance and counts nothing unready.
        expect(s.group, showCounts(s.group)).to.include({
          ready: 1,
          unready: 0,
          unregistered: 1,
          longUnregistered: 0,
        });
        // Only the booting node can be unready cluster-wide, and the cluster stays healthy.
        expect(s.cluster.unready + s.cluster.notStarted, showCounts(s.cluster)).to.equal(1);
      }
      // Not even between its Ready condition and the removal of its not-ready taint.
      expect(
        groupUnready.map((s) => `${s.loopAt - readyAt}ms after Ready: ${showCounts(s.group)}`),
        'loops with the group unready',
      ).to.deep.equal([]);
      expect(
        samples.every((s) => s.health === 'Healthy'),
        'the cluster stayed Healthy',
      ).to.equal(true);
      expect(Math.max(...samples.map((s) => s.target)), "the group's target in the status").to.equal(2);
      expect(Math.max(...replicas.seen), 'replicas raised once, by one').to.equal(2);
      expect(scaleUpsIn(log), 'the scale-ups').to.deep.equal([`${group} 2`]);
      expect(deleted, 'no machine or node of the group deleted').to.deep.equal([]);
      for (const call of ['NodeGroupDeleteNodes', 'NodeGroupDecreaseTargetSize'])
        expect(linesWith(log, `Performing gRPC call ${call}`), call).to.deep.equal([]);
    });
  });
});
