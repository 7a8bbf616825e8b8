// The template node of a group (pure): what a new, empty node of the group looks like, so that the
// autoscaler can simulate pods on it and scale a group up from zero.

import { nodeTemplateResources } from '../api/nodetemplate.js';
import type { MachineClass, MachineDeployment } from '../api/types.js';
import { formatValidationErrors } from '../api/validation.js';
import type { DeepReadonly } from '../kube/informer.js';
import type { ConditionStatus, Node, NodeCondition } from '../kube/types.js';
import { WellKnownLabel } from '../kube/wellknown.js';

/**
 * On a template node: the id of its node group, so that the template can be priced by its group
 * (PricingNodePrice receives the template node the autoscaler built from ours, annotations kept).
 */
export const TEMPLATE_GROUP_ANNOTATION = 'autoscaler.mcm-ts.io/node-group';

export type TemplateResult = { node: Node } | { unavailable: string };

/**
 * Builds the template node from the class's nodeTemplate (capacity, virtual capacity, allocatable,
 * instance type, region, zone, architecture) and the deployment's node template (labels, taints).
 * Without a nodeTemplate there is nothing to say: the caller answers UNIMPLEMENTED and the
 * autoscaler uses a real node of the group. Capacity without `pods` gets the kubelet default;
 * allocatable is `nodeTemplate.allocatable` where it names a resource, else the capacity (as
 * gardener's autoscaler provider has it), which overstates a real node by what its kubelet reserves.
 */
export function buildTemplateNode(
  groupId: string,
  mcd: MachineDeployment | DeepReadonly<MachineDeployment>,
  cls: MachineClass | DeepReadonly<MachineClass> | undefined,
): TemplateResult {
  if (cls === undefined) return { unavailable: 'its MachineClass does not exist' };
  const t = cls.nodeTemplate;
  if (t === undefined) {
    return { unavailable: `MachineClass ${cls.metadata.name ?? ''} has no nodeTemplate` };
  }
  const { capacity, allocatable, problems } = nodeTemplateResources(t, { virtualCapacity: true });
  if (problems.length > 0) {
    return { unavailable: `MachineClass ${cls.metadata.name ?? ''}: ${formatValidationErrors(problems)}` };
  }
  const arch = t.architecture ?? 'amd64';
  const name = `template-${groupId.replace('/', '-')}`;
  const spec = mcd.spec?.template.spec?.nodeTemplate;
  const labels: Record<string, string> = {
    ...(spec?.metadata?.labels ?? {}),
    [WellKnownLabel.Hostname]: name,
    [WellKnownLabel.Arch]: arch,
    [WellKnownLabel.BetaArch]: arch,
    [WellKnownLabel.OS]: 'linux',
    [WellKnownLabel.BetaOS]: 'linux',
    [WellKnownLabel.InstanceType]: t.instanceType,
    [WellKnownLabel.BetaInstanceType]: t.instanceType,
    [WellKnownLabel.Region]: t.region,
    [WellKnownLabel.BetaRegion]: t.region,
    [WellKnownLabel.Zone]: t.zone,
    [WellKnownLabel.BetaZone]: t.zone,
  };
  const taints = (spec?.spec?.taints ?? []).map((x) => ({ ...x }));
  const condition = (type: string, status: ConditionStatus, reason: string): NodeCondition => ({
    type,
    status,
    reason,
    message: 'template node',
  });
  return {
    node: {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name, labels, annotations: { [TEMPLATE_GROUP_ANNOTATION]: groupId } },
      spec: { taints },
      status: {
        capacity,
        allocatable,
        conditions: [
          condition('Ready', 'True', 'KubeletReady'),
          condition('MemoryPressure', 'False', 'KubeletHasSufficientMemory'),
          condition('DiskPressure', 'False', 'KubeletHasNoDiskPressure'),
          condition('PIDPressure', 'False', 'KubeletHasSufficientPID'),
          condition('NetworkUnavailable', 'False', 'RouteCreated'),
        ],
        nodeInfo: { operatingSystem: 'linux', architecture: arch },
      },
    },
  };
}
