// The price book of the externalgrpc server: answers PricingNodePrice and PricingPodPrice from the
// manager's caches and the providers' in-memory prices (never a cloud call on the autoscaler's
// path), a notional price from its size for a group nothing prices, and exports each group's price
// as a metric.

import { Gauge, type Registry } from 'prom-client';

import { nodeTemplateResources } from '../api/nodetemplate.js';
import { quantityNanos } from '../api/quantity.js';
import type { MachineClass, MachineDeployment } from '../api/types.js';
import type { SharedInformers } from '../controllers/context.js';
import type { NodePriceAnswer, NodePriceRequest } from '../driver/registry.js';
import type { EventRecorder } from '../kube/events.js';
import type { DeepReadonly } from '../kube/informer.js';
import type { Node } from '../kube/types.js';
import { WellKnownLabel } from '../kube/wellknown.js';
import type { Logger } from '../observability/logger.js';
import { invalidArgument, notFound, type GrpcStatusError } from './errors.js';
import type { NodeGroup } from './groups.js';
import type { GroupLookup, NodeRef } from './lookup.js';
import {
  NOTIONAL_RATES,
  PRICE_ANNOTATION,
  notionalPricePerHour,
  podPricePerHour,
  priceOverride,
  windowHours,
  type PodRequests,
  type PricedShape,
} from './pricing.js';
import { TEMPLATE_GROUP_ANNOTATION } from './template.js';

type RDeployment = DeepReadonly<MachineDeployment>;
type RClass = DeepReadonly<MachineClass>;

/** The autoscaler names the template nodes it prices `template-node-for-<group id>-<number>`. */
const TEMPLATE_NODE_NAME = /^template-node-for-(.+)-\d+$/;

export interface PriceBookOptions {
  lookup: GroupLookup;
  informers: SharedInformers;
  /** A node's price from its class's provider (ProviderRegistry.nodePrice). */
  providerPrice: (provider: string, req: NodePriceRequest) => NodePriceAnswer;
  recorder?: EventRecorder | undefined;
  logger: Logger;
  registry: Registry;
}

interface Priced {
  pricePerHour: number;
  currency: string;
  source: string;
  /** Set when no annotation nor provider prices it: the price follows its cpu and memory. */
  notional?: boolean;
}
type PriceAnswer = Priced | { unknown: string };

/** A node's size in cores and bytes: capacity prices it, allocatable holds pods. */
interface Shape {
  capacity: { cpu: number; memory: number };
  allocatable: { cpu: number; memory: number };
  from: string;
}

export class PriceBook {
  private shapes: PricedShape[] | undefined;
  private readonly reported = new Set<string>();

  constructor(private readonly opts: PriceBookOptions) {
    const dirty = (): void => {
      this.shapes = undefined;
    };
    for (const informer of [opts.informers.machineDeployments, opts.informers.machineClasses]) {
      informer.addHandler({ onAdd: dirty, onUpdate: dirty, onDelete: dirty });
    }
    // A group without a nodeTemplate is sized by its nodes: a node that comes or goes may change it
    // (a node's size does not change while it lives, so its updates, heartbeats mostly, do not).
    opts.informers.nodes?.addHandler({ onAdd: dirty, onDelete: dirty });
    const groupPrices = (): { group: string; pricePerHour: number; currency: string; notional: boolean }[] =>
      this.opts.lookup.groups().flatMap((g) => {
        const p = this.groupPrice(g);
        return 'pricePerHour' in p
          ? [
              {
                group: g.id,
                pricePerHour: p.pricePerHour,
                currency: p.currency,
                notional: p.notional === true,
              },
            ]
          : [];
      });
    new Gauge({
      name: 'mcm_autoscaler_node_group_price_per_hour',
      help: 'Price of one node of a group per hour, as the price expander is told (currency as the provider prices; "" for the price-per-hour annotation; notional="true" when neither prices the group and the price is its cpu and memory at the notional rates). Groups with no price and no size have no series.',
      labelNames: ['node_group', 'currency', 'notional'],
      registers: [opts.registry],
      collect() {
        this.reset();
        for (const p of groupPrices())
          this.set(
            { node_group: p.group, currency: p.currency, notional: String(p.notional) },
            p.pricePerHour,
          );
      },
    });
  }

  /**
   * PricingNodePrice: the node's price over [start, end]. A node no annotation nor provider prices
   * gets its notional price (NOTIONAL_RATES), so the price expander never drops its group; NOT_FOUND
   * only for a node that is not ours or whose size nothing says.
   */
  nodePrice(
    node: NodeRef & { annotations: Readonly<Record<string, string>> },
    startMs: number,
    endMs: number,
  ): number | GrpcStatusError {
    const hours = windowHours(startMs, endMs);
    if (hours === undefined) return invalidArgument('the price window must have a start and an end after it');
    const target = this.resolve(node);
    if ('unknown' in target)
      return notFound(`no price for node ${node.name || node.providerID}: ${target.unknown}`);
    const p = this.price(target.mcd, target.cls, node.labels, target.node, true);
    if ('unknown' in p) return notFound(`no price for node ${node.name || node.providerID}: ${p.unknown}`);
    return p.pricePerHour * hours;
  }

  /**
   * PricingPodPrice: the pod's share of the most cost-efficient group's node over [start, end]:
   * among the priced groups, or the notionally priced ones when no group has a price, or the pod's
   * own cpu and memory at the notional rates when no group has a size.
   */
  podPrice(pod: PodRequests, startMs: number, endMs: number): number | GrpcStatusError {
    const hours = windowHours(startMs, endMs);
    if (hours === undefined) return invalidArgument('the price window must have a start and an end after it');
    const perHour =
      podPricePerHour(pod, this.pricedShapes()) ?? notionalPricePerHour(pod.cpu, pod.memory) ?? 0;
    return perHour * hours;
  }

  /** The price per hour of a new node of the group (its template), for metrics. */
  groupPrice(g: NodeGroup): PriceAnswer {
    const mcd = this.opts.lookup.deployment(g);
    if (mcd === undefined) return { unknown: `machine deployment ${g.id} does not exist` };
    const cls = this.classOf(mcd);
    if (cls === undefined) return { unknown: `the MachineClass of ${g.id} does not exist` };
    return this.price(mcd, cls, templateLabels(cls), undefined, false);
  }

  /** The deployment and class that price a node: its machine's, else the template's group. */
  private resolve(
    node: NodeRef & { annotations: Readonly<Record<string, string>> },
  ):
    | { mcd: RDeployment | undefined; cls: RClass; node?: DeepReadonly<Node> | undefined }
    | { unknown: string } {
    const { lookup } = this.opts;
    const m = lookup.machineForNode(node);
    if (m !== undefined) {
      const g = lookup.groupOfMachine(m);
      const mcd = g === undefined ? undefined : lookup.deployment(g);
      const clsName = m.spec?.class?.name ?? '';
      const cls = this.opts.informers.machineClasses.get(m.metadata.namespace, clsName);
      if (cls === undefined)
        return { unknown: `MachineClass ${clsName} of machine ${m.metadata.name ?? ''} does not exist` };
      return { mcd, cls, node: lookup.nodeOf(m) };
    }
    const id = node.annotations[TEMPLATE_GROUP_ANNOTATION] ?? TEMPLATE_NODE_NAME.exec(node.name)?.[1];
    if (id === undefined)
      return { unknown: 'it is not a machine of this manager nor a template node of a node group' };
    const g = lookup.groupById(id);
    const mcd = g === undefined ? undefined : lookup.deployment(g);
    if (mcd === undefined) return { unknown: `node group ${id} is not served` };
    const cls = this.classOf(mcd);
    if (cls === undefined) return { unknown: `the MachineClass of node group ${id} does not exist` };
    return { mcd, cls };
  }

  private classOf(mcd: RDeployment): RClass | undefined {
    const name = mcd.spec?.template.spec?.class?.name ?? '';
    return this.opts.informers.machineClasses.get(mcd.metadata.namespace, name);
  }

  /**
   * The real price (hourly), else the notional price of the node's size: the node's own when it is
   * known, else its group's (the class's nodeTemplate, else a node of the group). `report` tells the
   * deployment's owner, once per price and reason, that the price expander is told a notional price.
   */
  private price(
    mcd: RDeployment | undefined,
    cls: RClass,
    labels: Readonly<Record<string, string>>,
    node: DeepReadonly<Node> | undefined,
    report: boolean,
  ): PriceAnswer {
    const p = this.hourly(mcd, cls, labels);
    if ('pricePerHour' in p) return p;
    const shape = (node === undefined ? undefined : nodeShape(node)) ?? this.groupShape(mcd, cls);
    const notional =
      shape === undefined ? undefined : notionalPricePerHour(shape.capacity.cpu, shape.capacity.memory);
    if (shape === undefined || notional === undefined) {
      return {
        unknown: `${p.unknown}, and neither a nodeTemplate nor a node of the group says its cpu and memory for a notional price`,
      };
    }
    if (report && mcd !== undefined) this.reportNotional(mcd, p.unknown, notional, shape);
    return {
      pricePerHour: notional,
      currency: 'USD',
      source: `notional: ${shape.from} at ${NOTIONAL_RATES.source}`,
      notional: true,
    };
  }

  /** The size of a node of the group: the class's nodeTemplate, else the first node of the group. */
  private groupShape(mcd: RDeployment | undefined, cls: RClass): Shape | undefined {
    const t = cls.nodeTemplate;
    if (t !== undefined) {
      const { capacity, allocatable } = nodeTemplateResources(t, { virtualCapacity: false });
      const shape = sized(
        capacity,
        allocatable,
        `the nodeTemplate of MachineClass ${cls.metadata.name ?? ''}`,
      );
      if (shape !== undefined) return shape;
    }
    if (mcd === undefined) return undefined;
    for (const m of this.opts.lookup.machines(mcd)) {
      const n = this.opts.lookup.nodeOf(m);
      const shape = n === undefined ? undefined : nodeShape(n);
      if (shape !== undefined) return shape;
    }
    return undefined;
  }

  /** Override on the deployment, else on the class, else the provider's price. */
  private hourly(
    mcd: RDeployment | undefined,
    cls: RClass,
    labels: Readonly<Record<string, string>>,
  ): NodePriceAnswer {
    if (mcd !== undefined) {
      const o = this.override(mcd, `MachineDeployment ${mcd.metadata.name ?? ''}`);
      if (o !== undefined) return o;
    }
    const o = this.override(cls, `MachineClass ${cls.metadata.name ?? ''}`);
    if (o !== undefined) return o;
    return this.opts.providerPrice(cls.provider ?? '', { machineClass: cls, labels });
  }

  private override(obj: RDeployment | RClass, where: string): Priced | undefined {
    const o = priceOverride(obj.metadata.annotations?.[PRICE_ANNOTATION], where);
    if (o === undefined) return undefined;
    if ('problem' in o) {
      this.report(obj, o.problem);
      return undefined;
    }
    return o;
  }

  /** Tells the owner of a bad price annotation once per object version (event and log). */
  private report(obj: RDeployment | RClass, problem: string): void {
    const key = `${obj.metadata.uid ?? ''}/${obj.metadata.resourceVersion ?? ''}/${problem}`;
    if (!this.firstTime(key)) return;
    this.opts.logger.warn('price annotation ignored', { problem });
    this.opts.recorder?.event(obj, 'Warning', 'InvalidPriceAnnotation', `${problem}; it is ignored`);
  }

  /**
   * Tells the owner of a deployment the price expander prices notionally, once per price and
   * reason (a deployment's version changes with every scale; the price does not).
   */
  private reportNotional(mcd: RDeployment, why: string, pricePerHour: number, shape: Shape): void {
    const price = pricePerHour.toFixed(6);
    if (!this.firstTime(`${mcd.metadata.uid ?? ''}/notional/${price}/${why}`)) return;
    const size = `${shape.capacity.cpu} vCPU and ${(shape.capacity.memory / 1024 ** 3).toFixed(2)} GiB`;
    this.opts.logger.info('node group priced notionally', {
      node_group: `${mcd.metadata.namespace ?? ''}/${mcd.metadata.name ?? ''}`,
      price_per_hour: Number(price),
    });
    this.opts.recorder?.event(
      mcd,
      'Warning',
      'NotionalPrice',
      `${why}: the price expander is told a notional ${price} per hour (${size} from ${shape.from}, at ${NOTIONAL_RATES.source}); set ${PRICE_ANNOTATION} to price it`,
    );
  }

  private firstTime(key: string): boolean {
    if (this.reported.has(key)) return false;
    if (this.reported.size > 1000) this.reported.clear();
    this.reported.add(key);
    return true;
  }

  /**
   * Every served group's size with its price (rebuilt when a deployment, class or node comes or
   * changes): the groups with a real price, or, when none has one, every group at its notional price.
   */
  private pricedShapes(): PricedShape[] {
    if (this.shapes !== undefined) return this.shapes;
    const real: PricedShape[] = [];
    const notional: PricedShape[] = [];
    for (const g of this.opts.lookup.groups()) {
      const mcd = this.opts.lookup.deployment(g);
      const cls = mcd === undefined ? undefined : this.classOf(mcd);
      if (mcd === undefined || cls === undefined) continue;
      const shape = this.groupShape(mcd, cls);
      if (shape === undefined || shape.allocatable.cpu <= 0 || shape.allocatable.memory <= 0) continue;
      const { cpu, memory } = shape.allocatable;
      const p = this.hourly(mcd, cls, templateLabels(cls));
      if ('pricePerHour' in p) {
        real.push({ group: g.id, pricePerHour: p.pricePerHour, cpu, memory });
        continue;
      }
      const n = notionalPricePerHour(shape.capacity.cpu, shape.capacity.memory);
      if (n !== undefined) notional.push({ group: g.id, pricePerHour: n, cpu, memory });
    }
    this.shapes = real.length > 0 ? real : notional;
    return this.shapes;
  }
}

/** The size of a node from its status (allocatable defaults to capacity); undefined without one. */
function nodeShape(n: DeepReadonly<Node>): Shape | undefined {
  const capacity = n.status?.capacity ?? {};
  return sized(capacity, { ...capacity, ...(n.status?.allocatable ?? {}) }, `node ${n.metadata.name ?? ''}`);
}

function sized(
  capacity: Readonly<Record<string, string>>,
  allocatable: Readonly<Record<string, string>>,
  from: string,
): Shape | undefined {
  const shape = {
    capacity: { cpu: cores(capacity.cpu), memory: cores(capacity.memory) },
    allocatable: { cpu: cores(allocatable.cpu), memory: cores(allocatable.memory) },
    from,
  };
  return shape.capacity.cpu > 0 || shape.capacity.memory > 0 ? shape : undefined;
}

/** A quantity as a plain number of its unit (cores, bytes); 0 when absent or unreadable. */
function cores(q: string | undefined): number {
  if (q === undefined) return 0;
  const n = quantityNanos(q);
  return n === undefined || n < 0n ? 0 : Number(n) / 1e9;
}

/** The labels a template node of the class carries (what a provider prices by). */
function templateLabels(cls: RClass): Record<string, string> {
  const t = cls.nodeTemplate;
  if (t === undefined) return {};
  return {
    [WellKnownLabel.InstanceType]: t.instanceType,
    [WellKnownLabel.Region]: t.region,
    [WellKnownLabel.Zone]: t.zone,
  };
}

export { PRICE_ANNOTATION };
