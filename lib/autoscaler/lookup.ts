// Answers "which group, which machines, which node" from the shared caches in O(1) per question:
// machines by providerID and by node name, sets and machines by controller UID, the groups
// recomputed only when a deployment changes, and the deployments this server just wrote (so that
// the next RPC reads its own writes before the watch delivers them).

import { Label } from '../api/constants.js';
import type { Machine, MachineDeployment, MachineSet } from '../api/types.js';
import {
  MACHINE_NODE_INDEX,
  MACHINE_PROVIDER_ID_INDEX,
  NODE_MACHINE_INDEX,
  type SharedInformers,
} from '../controllers/context.js';
import { controllerRefOf, vmKey } from '../controllers/machines.js';
import type { Clock } from '../kube/clock.js';
import { CONTROLLER_UID_INDEX, type DeepReadonly } from '../kube/informer.js';
import type { Node } from '../kube/types.js';
import type { Logger } from '../observability/logger.js';
import { discoverGroups, parseGroupId, type NodeGroup, type NodeGroupFlag } from './groups.js';
import { machineOfPlaceholder } from './instances.js';

type RMachine = DeepReadonly<Machine>;
type RDeployment = DeepReadonly<MachineDeployment>;
type RSet = DeepReadonly<MachineSet>;

/** What the autoscaler says about a node (ExternalGrpcNode). */
export interface NodeRef {
  providerID: string;
  name: string;
  labels: Readonly<Record<string, string>>;
}

/** How long a written deployment overrides the cache if the watch never shows that version. */
const WRITTEN_TTL_MS = 30_000;
/** Versions per deployment remembered from the watch. */
const SEEN_VERSIONS = 8;

export class GroupLookup {
  private groupCache: Map<string, NodeGroup> | undefined;
  private readonly written = new Map<string, { obj: RDeployment; at: number }>();
  private readonly problems = new Map<string, string>();
  /** The last versions of each deployment the watch delivered. */
  private readonly seen = new Map<string, string[]>();

  constructor(
    private readonly informers: SharedInformers,
    /** The control namespace: the caches hold its machine objects only. */
    private readonly namespace: string,
    private readonly flags: readonly NodeGroupFlag[],
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {
    const dirty = (): void => {
      this.groupCache = undefined;
    };
    informers.machineDeployments.addHandler({
      onAdd: (obj) => {
        dirty();
        this.saw(obj);
      },
      onUpdate: (_old, obj) => {
        dirty();
        this.saw(obj);
      },
      onDelete: (obj) => {
        dirty();
        const key = `${obj.metadata.namespace ?? ''}/${obj.metadata.name ?? ''}`;
        this.written.delete(key);
        this.seen.delete(key);
      },
    });
  }

  /**
   * Notes a version the watch delivered: it ends the override of a write of that version, and it
   * is remembered for a while because the watch may deliver a version before the write's response
   * arrives.
   */
  private saw(obj: RDeployment): void {
    const key = `${obj.metadata.namespace ?? ''}/${obj.metadata.name ?? ''}`;
    const rv = obj.metadata.resourceVersion ?? '';
    if (this.written.get(key)?.obj.metadata.resourceVersion === rv) this.written.delete(key);
    const list = this.seen.get(key) ?? [];
    list.push(rv);
    if (list.length > SEEN_VERSIONS) list.shift();
    this.seen.set(key, list);
  }

  /** The served groups, sorted by id. */
  groups(): NodeGroup[] {
    return [...this.groupMap().values()];
  }

  group(id: string): NodeGroup | undefined {
    return this.groupMap().get(id);
  }

  private groupMap(): Map<string, NodeGroup> {
    if (this.groupCache !== undefined) return this.groupCache;
    const { groups, problems } = discoverGroups(this.informers.machineDeployments.list(), this.flags);
    for (const p of problems) {
      if (this.problems.get(p.id) !== p.message) {
        this.problems.set(p.id, p.message);
        this.log.warn('machine deployment is not served as a node group', {
          deployment: p.id,
          reason: p.message,
        });
      }
    }
    for (const f of this.flags) {
      const id = `${f.namespace}/${f.name}`;
      const why = 'named by --nodes but it does not exist';
      if (
        !groups.some((g) => g.id === id) &&
        this.informers.machineDeployments.get(f.namespace, f.name) === undefined
      ) {
        if (this.problems.get(id) !== why) {
          this.problems.set(id, why);
          this.log.warn('machine deployment is not served as a node group', { deployment: id, reason: why });
        }
      }
    }
    this.groupCache = new Map(groups.map((g) => [g.id, g]));
    return this.groupCache;
  }

  /** The group's deployment: what this server last wrote until the cache shows it, else the cache. */
  deployment(group: NodeGroup): RDeployment | undefined {
    const w = this.written.get(group.id);
    if (w !== undefined) {
      if (this.clock.now() - w.at < WRITTEN_TTL_MS) return w.obj;
      this.written.delete(group.id);
    }
    return this.informers.machineDeployments.get(group.namespace, group.name);
  }

  /** Records a deployment returned by one of our writes (read-your-writes). */
  wrote(group: NodeGroup, obj: MachineDeployment): void {
    if (this.seen.get(group.id)?.includes(obj.metadata.resourceVersion ?? '') === true) return;
    this.written.set(group.id, { obj, at: this.clock.now() });
  }

  /** MachineSets controlled by the deployment. */
  sets(mcd: RDeployment): RSet[] {
    const uid = mcd.metadata.uid;
    if (uid === undefined) return [];
    return this.informers.machineSets.byIndex(CONTROLLER_UID_INDEX, uid);
  }

  /** Machines controlled by the deployment's sets (old and new). */
  machines(mcd: RDeployment): RMachine[] {
    return this.sets(mcd).flatMap((s) =>
      s.metadata.uid === undefined
        ? []
        : this.informers.machines.byIndex(CONTROLLER_UID_INDEX, s.metadata.uid),
    );
  }

  /** The machine's Node, by its `node` label or the node's machine-name label. */
  nodeOf(m: RMachine): DeepReadonly<Node> | undefined {
    const nodes = this.informers.nodes;
    if (nodes === undefined) return undefined;
    const name = m.metadata.labels?.[Label.Node];
    if (name !== undefined && name !== '') {
      const n = nodes.get(undefined, name);
      if (n !== undefined) return n;
    }
    return nodes.byIndex(NODE_MACHINE_INDEX, m.metadata.name ?? '')[0];
  }

  /**
   * The machine behind a node the autoscaler names: a placeholder id; the providerID's VM; the
   * node's machine-name label; a machine whose `node` label is the node's name; finally the last
   * providerID segment as a machine name (gardener's rule, for providers that name VMs so).
   */
  machineForNode(node: NodeRef): RMachine | undefined {
    const machines = this.informers.machines;
    const ns = this.namespace;
    const placeholder = machineOfPlaceholder(node.providerID) ?? machineOfPlaceholder(node.name);
    if (placeholder !== undefined) return machines.get(ns, placeholder);
    if (node.providerID !== '') {
      const byId = machines.byIndex(MACHINE_PROVIDER_ID_INDEX, vmKey(node.providerID))[0];
      if (byId !== undefined) return byId;
    }
    const labelled = node.labels[Label.NodeMachineName];
    if (labelled !== undefined) {
      const m = machines.get(ns, labelled);
      if (m !== undefined) return m;
    }
    if (node.name !== '') {
      const byNode = machines.byIndex(MACHINE_NODE_INDEX, node.name)[0];
      if (byNode !== undefined) return byNode;
    }
    if (node.providerID !== '') {
      const last = node.providerID.slice(node.providerID.lastIndexOf('/') + 1);
      if (last !== '') return machines.get(ns, last);
    }
    return undefined;
  }

  /** The group a machine belongs to, following controller references Machine → set → deployment. */
  groupOfMachine(m: RMachine): NodeGroup | undefined {
    const ns = m.metadata.namespace ?? '';
    const setRef = controllerRefOf(m);
    if (setRef?.kind !== 'MachineSet') return undefined;
    const set = this.informers.machineSets.get(ns, setRef.name);
    if (set?.metadata.uid !== setRef.uid) return undefined;
    const mcdRef = controllerRefOf(set);
    if (mcdRef?.kind !== 'MachineDeployment') return undefined;
    const mcd = this.informers.machineDeployments.get(ns, mcdRef.name);
    if (mcd?.metadata.uid !== mcdRef.uid) return undefined;
    return this.group(`${ns}/${mcdRef.name}`);
  }

  /** Parses a group id and returns the served group; undefined when unknown. */
  groupById(id: string): NodeGroup | undefined {
    return parseGroupId(id) === undefined ? undefined : this.group(id);
  }
}
