// A kubelet simulator for EC2 instances: for every running instance with the test's cluster tag it
// registers the Node a real kubelet on that instance would (name = private DNS name, providerID
// `aws:///<zone>/<instance-id>`, the instance type and zone as labels); kwok then plays the
// kubelet (the node turns Ready). It removes the Nodes of instances that are terminated or gone,
// as the cloud controller manager's node lifecycle controller does.

import { DescribeInstancesCommand, EC2Client, type Instance } from '@aws-sdk/client-ec2';

import { AlreadyExistsError, NotFoundError } from '../../lib/kube/errors.js';
import type { KubeApi } from '../../lib/kube/client.js';
import { CoreResources } from '../../lib/kube/resources.js';
import type { Node } from '../../lib/kube/types.js';
import { KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE } from './controlplane.js';
import type { Ec2FaultProxy } from './ec2proxy.js';

/** Marks the Nodes this simulator registered (it removes no other Node). */
export const SIMULATED_NODE_LABEL = 'ec2-kubelet.mcm-ts.io/simulated';

export interface Ec2KubeletOptions {
  /** The emulator's endpoint (or any EC2 endpoint). */
  endpoint: string;
  region: string;
  /** Instances with this tag key are the cluster's. */
  clusterTag: string;
  /** The target cluster the Nodes are registered in. */
  client: KubeApi;
  /** How often EC2 is looked at (default 500 ms). */
  intervalMs?: number;
  /** What a node of any instance type offers (default 2 CPUs, 8Gi, 110 pods). */
  capacity?: Record<string, string>;
  /** What a node of an instance type offers, where it differs from `capacity`. */
  capacityByType?: Record<string, Record<string, string>>;
  /**
   * How long after the simulator first sees an instance running its Node registers (the boot of
   * a real instance; default 0: at once, which the emulator's instant start makes a hard case).
   */
  bootDelayMs?: number;
  /** The credentials of its EC2 client (default: fixed test keys, for an emulator that checks none). */
  credentials?: { accessKeyId: string; secretAccessKey: string };
}

/** The fields of a started instance a Node needs, as an EC2 answer carries them. */
export interface LaunchedInstance {
  InstanceId?: string | undefined;
  PrivateDnsName?: string | undefined;
  PrivateIpAddress?: string | undefined;
  InstanceType?: string | undefined;
  Placement?: { AvailabilityZone?: string | undefined } | undefined;
}

const field = (xml: string, tag: string): string | undefined =>
  new RegExp(`<${tag}>([^<]*)</${tag}>`).exec(xml)?.[1];

/** The instances of a RunInstances answer (EC2's XML), each from its instanceId on. */
export function launchedInstances(xml: string): LaunchedInstance[] {
  return xml
    .split('<instanceId>')
    .slice(1)
    .map((part) => {
      const rest = `<instanceId>${part}`;
      return {
        InstanceId: field(rest, 'instanceId'),
        PrivateDnsName: field(rest, 'privateDnsName'),
        PrivateIpAddress: field(rest, 'privateIpAddress'),
        InstanceType: field(rest, 'instanceType'),
        Placement: { AvailabilityZone: field(rest, 'availabilityZone') },
      };
    })
    .filter((i) => (i.InstanceId ?? '') !== '' && (i.PrivateDnsName ?? '') !== '');
}

function nodeOf(i: LaunchedInstance, region: string, capacity: Record<string, string>): Node {
  const name = i.PrivateDnsName ?? '';
  const zone = i.Placement?.AvailabilityZone ?? '';
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      labels: {
        'kubernetes.io/hostname': name,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
        'node.kubernetes.io/instance-type': i.InstanceType ?? '',
        'topology.kubernetes.io/region': region,
        'topology.kubernetes.io/zone': zone,
        [SIMULATED_NODE_LABEL]: 'true',
      },
      annotations: { [KWOK_NODE_ANNOTATION]: KWOK_NODE_ANNOTATION_VALUE },
    },
    spec: { providerID: `aws:///${zone}/${i.InstanceId ?? ''}` },
    status: {
      capacity: { ...capacity },
      allocatable: { ...capacity },
      addresses: [
        { type: 'InternalIP', address: i.PrivateIpAddress ?? '' },
        { type: 'Hostname', address: name },
        { type: 'InternalDNS', address: name },
      ],
    },
  };
}

export class Ec2KubeletSimulator {
  private readonly ec2: EC2Client;
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;
  /** Nodes registered and removed so far, by name (for assertions). */
  readonly registered = new Set<string>();
  readonly removed = new Set<string>();
  /** When each running instance was first seen, by id. */
  private readonly firstSeen = new Map<string, number>();
  /** Boots under way of instances learnt from the proxy. */
  private readonly boots = new Set<NodeJS.Timeout>();
  /** Instances terminated (see terminated()): their Nodes are removed, never registered. */
  private readonly gone = new Set<string>();
  /** Node names of the instances started through the proxy, by id. */
  private readonly names = new Map<string, string>();
  lastError: unknown;

  constructor(private readonly opts: Ec2KubeletOptions) {
    this.ec2 = new EC2Client({
      region: opts.region,
      endpoint: opts.endpoint,
      credentials: opts.credentials ?? { accessKeyId: 'kubelet', secretAccessKey: 'kubelet' },
    });
  }

  start(): void {
    const interval = this.opts.intervalMs ?? 500;
    this.loop = (async () => {
      while (!this.abort.signal.aborted) {
        try {
          await this.syncOnce();
          this.lastError = undefined;
        } catch (err) {
          // A pass cut short by stop() is no error; the loop ends at its condition.
          this.lastError = err;
        }
        await new Promise<void>((resolve) => {
          const done = (): void => {
            clearTimeout(t);
            this.abort.signal.removeEventListener('abort', done);
            resolve();
          };
          const t = setTimeout(done, interval);
          this.abort.signal.addEventListener('abort', done);
        });
      }
    })();
  }

  /**
   * Fed from the EC2 proxy's answers (see watch()): an instance just started boots and registers
   * its Node after the boot delay, as its kubelet would, with no DescribeInstances at all.
   */
  launched(instances: LaunchedInstance[]): void {
    const capacity = this.opts.capacity ?? { cpu: '2', memory: '8Gi', pods: '110' };
    for (const i of instances) {
      this.names.set(i.InstanceId ?? '', i.PrivateDnsName ?? '');
      const timer = setTimeout(() => {
        this.boots.delete(timer);
        if (this.abort.signal.aborted || this.gone.has(i.InstanceId ?? '')) return;
        const offers = this.opts.capacityByType?.[i.InstanceType ?? ''] ?? capacity;
        this.opts.client.create<Node>(CoreResources.nodes, nodeOf(i, this.opts.region, offers)).then(
          () => this.registered.add(i.PrivateDnsName ?? ''),
          (err: unknown) => {
            if (!(err instanceof AlreadyExistsError)) this.lastError = err;
          },
        );
      }, this.opts.bootDelayMs ?? 0);
      this.boots.add(timer);
    }
  }

  /**
   * Fed from the EC2 proxy's TerminateInstances calls (or by a test whose instances die before
   * they boot): their Nodes go at once, and they never register one.
   */
  terminated(instanceIds: string[]): void {
    for (const id of instanceIds) {
      this.gone.add(id);
      const name = this.names.get(id);
      if (name === undefined) continue; // not started through the proxy: the next poll sees it
      this.names.delete(id);
      this.opts.client.delete(CoreResources.nodes, name).then(
        () => this.removed.add(name),
        (err: unknown) => {
          if (!(err instanceof NotFoundError)) this.lastError = err;
        },
      );
    }
  }

  /** Learns of started and terminated instances from a proxy's answers (both sides alike). */
  watch(proxy: { onAnswer: Ec2FaultProxy['onAnswer'] }): void {
    proxy.onAnswer = (action, params, status, body) => {
      if (status !== 200) return;
      if (action === 'RunInstances') this.launched(launchedInstances(body.toString('utf8')));
      if (action === 'TerminateInstances') {
        const ids = [...params.entries()].filter(([k]) => k.startsWith('InstanceId.')).map(([, v]) => v);
        this.terminated(ids);
      }
    };
  }

  async stop(): Promise<void> {
    for (const t of this.boots) clearTimeout(t);
    this.boots.clear();
    this.abort.abort();
    await this.loop;
    this.lastError = undefined;
    this.ec2.destroy();
  }

  private async instances(): Promise<Instance[]> {
    const out: Instance[] = [];
    let NextToken: string | undefined;
    do {
      const page = await this.ec2.send(
        new DescribeInstancesCommand({
          Filters: [{ Name: 'tag-key', Values: [this.opts.clusterTag] }],
          ...(NextToken === undefined ? {} : { NextToken }),
        }),
        { abortSignal: this.abort.signal },
      );
      for (const r of page.Reservations ?? []) out.push(...(r.Instances ?? []));
      NextToken = page.NextToken === '' ? undefined : page.NextToken;
    } while (NextToken !== undefined);
    return out;
  }

  /** One pass: register the Nodes of running instances, remove those of instances that are gone. */
  async syncOnce(): Promise<void> {
    const capacity = this.opts.capacity ?? { cpu: '2', memory: '8Gi', pods: '110' };
    const all = await this.instances();
    // An instance terminated through the proxy (or declared so by terminated()) never registers,
    // even while the emulator still shows it running.
    const running = all.filter(
      (i) =>
        i.State?.Name === 'running' && (i.PrivateDnsName ?? '') !== '' && !this.gone.has(i.InstanceId ?? ''),
    );
    // A Node goes once its instance is terminated or gone, as the cloud controller manager does: a
    // stopped instance keeps its Node (the CCM only taints it), and whoever stopped it decides.
    const live = new Set(
      all
        .filter((i) => !['shutting-down', 'terminated'].includes(i.State?.Name ?? ''))
        .map((i) => i.InstanceId ?? ''),
    );
    const nodes = (
      await this.opts.client.list<Node>(CoreResources.nodes, {
        labelSelector: `${SIMULATED_NODE_LABEL}=true`,
      })
    ).items;
    const byName = new Map(nodes.map((n) => [n.metadata.name ?? '', n]));
    const now = Date.now();
    for (const id of this.firstSeen.keys()) if (!live.has(id)) this.firstSeen.delete(id);
    for (const i of running) {
      const name = i.PrivateDnsName ?? '';
      if (byName.has(name)) continue;
      const seen = this.firstSeen.get(i.InstanceId ?? '') ?? now;
      this.firstSeen.set(i.InstanceId ?? '', seen);
      if (now - seen < (this.opts.bootDelayMs ?? 0)) continue;
      const offers = this.opts.capacityByType?.[i.InstanceType ?? ''] ?? capacity;
      try {
        await this.opts.client.create<Node>(CoreResources.nodes, nodeOf(i, this.opts.region, offers));
        this.registered.add(name);
      } catch (err) {
        if (!(err instanceof AlreadyExistsError)) throw err;
      }
    }
    for (const n of nodes) {
      const providerID = n.spec?.providerID ?? '';
      const instanceId = providerID.slice(providerID.lastIndexOf('/') + 1);
      if (live.has(instanceId) || n.metadata.deletionTimestamp !== undefined) continue;
      try {
        await this.opts.client.delete(CoreResources.nodes, n.metadata.name ?? '');
        this.removed.add(n.metadata.name ?? '');
      } catch (err) {
        if (!(err instanceof NotFoundError)) throw err;
      }
    }
  }
}
