// Prices for cluster-autoscaler's price expander (pure): a node's price per hour from an override
// annotation or its provider's answer, the price of a time window, and a pod's price as its share
// of the most cost-efficient node the groups offer.

import type { NodePriceAnswer } from '../driver/registry.js';

/**
 * On a MachineDeployment or a MachineClass: the price of one node per hour, a plain decimal
 * ("0.096"). It wins over the provider's price (the deployment's over the class's): for clouds we
 * do not price, and for contracts a list price does not know.
 */
export const PRICE_ANNOTATION = 'autoscaler.mcm-ts.io/price-per-hour';

/** A price per hour, or why there is none. */
export type HourlyPrice = NodePriceAnswer;

/** The override an annotation sets: a price, a problem (not a number), or nothing. */
export function priceOverride(
  value: string | undefined,
  where: string,
): { pricePerHour: number; currency: string; source: string } | { problem: string } | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  const v = Number(value.trim());
  if (!Number.isFinite(v) || v < 0) {
    return {
      problem: `${PRICE_ANNOTATION} on ${where}: "${value}" is not a price per hour (a decimal >= 0, e.g. "0.096")`,
    };
  }
  return { pricePerHour: v, currency: '', source: `${PRICE_ANNOTATION} on ${where}` };
}

/**
 * The notional price of a node or a pod the providers do not price and no annotation prices: its
 * vCPUs and memory at AWS Fargate's published on-demand rates (Linux/x86, us-east-1: USD 0.04048
 * per vCPU-hour and USD 0.004445 per GB-hour, GB counted as GiB). A price proportional to the
 * resources keeps the price expander choosing the smaller shape, and a real price of a similar
 * shape is in the same range, so a priced group still competes fairly with an unpriced one.
 */
export const NOTIONAL_RATES = {
  perVcpuHour: 0.04048,
  perGiBHour: 0.004445,
  source: 'AWS Fargate on-demand rates (Linux/x86, us-east-1): 0.04048 per vCPU-hour, 0.004445 per GiB-hour',
} as const;

const GIB = 1024 ** 3;

/** The notional price per hour of `cpu` cores and `memory` bytes; undefined when both are 0. */
export function notionalPricePerHour(cpu: number, memory: number): number | undefined {
  if (!(cpu > 0) && !(memory > 0)) return undefined;
  return (
    Math.max(cpu, 0) * NOTIONAL_RATES.perVcpuHour + (Math.max(memory, 0) / GIB) * NOTIONAL_RATES.perGiBHour
  );
}

/** Hours between two instants (the autoscaler asks for now → now + 1 h); undefined if end < start. */
export function windowHours(startMs: number, endMs: number): number | undefined {
  if (!Number.isFinite(startMs) || !Number.isFinite(endMs) || endMs < startMs) return undefined;
  return (endMs - startMs) / 3_600_000;
}

/** What a pod asks for, in cores and bytes. */
export interface PodRequests {
  cpu: number;
  memory: number;
}

/** A priced node shape: what one node of a group costs and offers to pods. */
export interface PricedShape {
  group: string;
  pricePerHour: number;
  cpu: number;
  memory: number;
}

/**
 * The pod's price per hour: its dominant share (the larger of its CPU and memory fractions) of
 * the node that would host it most cheaply. Like the GCE model, the price follows the resources
 * requested, not the node the pod lands on, so the expander's ratio of node cost to pod cost
 * rewards options that waste less. A pod that requests nothing costs nothing; undefined when no
 * shape can hold it, or no group is priced.
 */
export function podPricePerHour(pod: PodRequests, shapes: readonly PricedShape[]): number | undefined {
  let best: number | undefined;
  for (const s of shapes) {
    if (s.cpu <= 0 && s.memory <= 0) continue;
    if (pod.cpu > s.cpu || pod.memory > s.memory) continue;
    const share = Math.max(s.cpu > 0 ? pod.cpu / s.cpu : 0, s.memory > 0 ? pod.memory / s.memory : 0);
    const price = s.pricePerHour * share;
    if (best === undefined || price < best) best = price;
  }
  if (best !== undefined) return best;
  // No single node holds the pod: price it at the cheapest rate per unit of its dominant resource.
  for (const s of shapes) {
    if (s.cpu <= 0 || s.memory <= 0) continue;
    const price = s.pricePerHour * Math.max(pod.cpu / s.cpu, pod.memory / s.memory);
    if (best === undefined || price < best) best = price;
  }
  return best;
}
