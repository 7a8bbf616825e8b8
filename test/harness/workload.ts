// Workloads the autoscaler scenarios (e2e, fault suite, soak) use to make the cluster-autoscaler
// scale: a Deployment whose pods each need a whole node of a pool.

import type { KubeObject } from '../../lib/kube/types.js';

/** apps/v1 Deployments (not among lib/kube's CoreResources: the product never touches them). */
export const AppsDeployments = {
  group: 'apps',
  version: 'v1',
  plural: 'deployments',
  kind: 'Deployment',
  namespaced: true,
} as const;

export interface AppsDeployment extends KubeObject {
  spec: Record<string, unknown>;
}

/**
 * A Deployment of `replicas` pods that each need a node of their own (1.5 of 2 CPUs, plus
 * `memory` when given) on nodes labelled pool=<pool>.
 */
export function nodeFillingDeployment(opts: {
  name: string;
  namespace: string;
  pool: string;
  replicas: number;
  memory?: string;
  /** Spread the pods over the nodes' zones (maxSkew 1, ScheduleAnyway). */
  spreadOverZones?: boolean;
}): AppsDeployment {
  const requests: Record<string, string> = { cpu: '1500m' };
  if (opts.memory !== undefined) requests.memory = opts.memory;
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: opts.name, namespace: opts.namespace },
    spec: {
      replicas: opts.replicas,
      selector: { matchLabels: { app: opts.name } },
      template: {
        metadata: { labels: { app: opts.name } },
        spec: {
          terminationGracePeriodSeconds: 0,
          nodeSelector: { pool: opts.pool },
          ...(opts.spreadOverZones === true
            ? {
                topologySpreadConstraints: [
                  {
                    maxSkew: 1,
                    topologyKey: 'topology.kubernetes.io/zone',
                    whenUnsatisfiable: 'ScheduleAnyway',
                    labelSelector: { matchLabels: { app: opts.name } },
                  },
                ],
              }
            : {}),
          containers: [{ name: 'app', image: 'registry.invalid/app:1', resources: { requests } }],
        },
      },
    },
  };
}
