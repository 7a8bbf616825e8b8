// The price book of the externalgrpc server: answers PricingNodePrice and PricingPodPrice from the
// manager's caches and the providers' in-memory prices (never a cloud call on the autoscaler's
// path), and exports each group's price as a metric.

import { Gauge, type Registry } from 'prom-client';

import { nodeTemplateResources } from '../api/nodetemplate.js';
import { quantityNanos } from '../api/quantity.js';
import type { MachineClass, MachineDeployment } from '../api/types.js';
import type { SharedInformers } from '../controllers/context.js';
import type { NodePriceAnswer, NodePriceRequest } from '../driver/registry.js';
import type { EventRecorder } from '../kube/events.js';
import type { DeepReadonly } from '../kube/informer.js';
import { WellKnownLabel } from '../kube/wellknown.js';
import type { Logger } from '../observability/logger.js';
import { invalidArgument, notFound, type GrpcStatusError } from './errors.js';
import type { NodeGroup } from './groups.js';
import type { GroupLookup, NodeRef } from './lookup.js';
import {
  PRICE_ANNOTATION,
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
    const groupPrices = (): { group: string; pricePerHour: number; currency: string }[] =>
      this.opts.lookup.groups().flatMap((g) => {
        const p = this.groupPrice(g);
        return 'pricePerHour' in p
          ? [{ group: g.id, pricePerHour: p.pricePerHour, currency: p.currency }]
          : [];
      });
    new Gauge({
      name: 'mcm_autoscaler_node_group_price_per_hour',
      help: 'Price of one node of a group per hour, as the price expander is told (currency as the provider prices; "" for the price-per-hour annotation). Groups without a price have no series.',
      labelNames: ['node_group', 'currency'],
      registers: [opts.registry],
      collect() {
        this.reset();
        for (const p of groupPrices())
          this.set({ node_group: p.group, currency: p.currency }, p.pricePerHour);
      },
    });
  }

  /** PricingNodePrice: the node's price over [start, end]. */
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
    const p = this.hourly(target.mcd, target.cls, node.labels);
    if ('unknown' in p) return notFound(`no price for node ${node.name || node.providerID}: ${p.unknown}`);
    return p.pricePerHour * hours;
  }

  /** PricingPodPrice: the pod's share of the most cost-efficient group's node over [start, end]. */
  podPrice(pod: PodRequests, startMs: number, endMs: number): number | GrpcStatusError {
    const hours = windowHours(startMs, endMs);
    if (hours === undefined) return invalidArgument('the price window must have a start and an end after it');
    const perHour = podPricePerHour(pod, this.pricedShapes());
    if (perHour === undefined) {
      return notFound(
        'no node group has both a price and a nodeTemplate with cpu and memory, so pods have no price',
      );
    }
    return perHour * hours;
  }

  /** The price per hour of a new node of the group (its template), for metrics. */
  groupPrice(g: NodeGroup): NodePriceAnswer {
    const mcd = this.opts.lookup.deployment(g);
    if (mcd === undefined) return { unknown: `machine deployment ${g.id} does not exist` };
    const cls = this.classOf(mcd);
    if (cls === undefined) return { unknown: `the MachineClass of ${g.id} does not exist` };
    return this.hourly(mcd, cls, templateLabels(cls));
  }

  /** The deployment and class that price a node: its machine's, else the template's group. */
  private resolve(
    node: NodeRef & { annotations: Readonly<Record<string, string>> },
  ): { mcd: RDeployment | undefined; cls: RClass } | { unknown: string } {
    const { lookup } = this.opts;
    const m = lookup.machineForNode(node);
    if (m !== undefined) {
      const g = lookup.groupOfMachine(m);
      const mcd = g === undefined ? undefined : lookup.deployment(g);
      const clsName = m.spec?.class?.name ?? '';
      const cls = this.opts.informers.machineClasses.get(m.metadata.namespace, clsName);
      if (cls === undefined)
        return { unknown: `MachineClass ${clsName} of machine ${m.metadata.name ?? ''} does not exist` };
      return { mcd, cls };
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
    if (this.reported.has(key)) return;
    if (this.reported.size > 1000) this.reported.clear();
    this.reported.add(key);
    this.opts.logger.warn('price annotation ignored', { problem });
    this.opts.recorder?.event(obj, 'Warning', 'InvalidPriceAnnotation', `${problem}; it is ignored`);
  }

  /** Every served group's template shape with its price (rebuilt when a deployment or class changes). */
  private pricedShapes(): PricedShape[] {
    if (this.shapes !== undefined) return this.shapes;
    const shapes: PricedShape[] = [];
    for (const g of this.opts.lookup.groups()) {
      const mcd = this.opts.lookup.deployment(g);
      const cls = mcd === undefined ? undefined : this.classOf(mcd);
      if (mcd === undefined || cls?.nodeTemplate === undefined) continue;
      const p = this.hourly(mcd, cls, templateLabels(cls));
      if (!('pricePerHour' in p)) continue;
      const { allocatable } = nodeTemplateResources(cls.nodeTemplate, { virtualCapacity: false });
      const cpu = cores(allocatable.cpu);
      const memory = cores(allocatable.memory);
      if (cpu > 0 && memory > 0) shapes.push({ group: g.id, pricePerHour: p.pricePerHour, cpu, memory });
    }
    this.shapes = shapes;
    return shapes;
  }
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
