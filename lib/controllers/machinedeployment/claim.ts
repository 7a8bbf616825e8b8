// Which MachineSets a deployment controls (controller-reference rules, see ../ownership.ts).

import {
  API_VERSION,
  MachineDeploymentResource,
  MachineSetResource,
  type MachineDeployment,
  type MachineSet,
} from '../../api/types.js';
import type { KubeApi } from '../../kube/client.js';
import { clone } from '../../kube/informer.js';
import type { SharedInformers } from '../context.js';
import { claim } from '../ownership.js';

/**
 * The sets a deployment controls, after adopting matching orphans and releasing owned sets its
 * selector no longer matches (controller-reference rules, see ownership.ts). Returned as mutable
 * copies. Adoption is confirmed by a live read of the deployment, so that one that is gone (or
 * going) never adopts on the word of a stale cache.
 */
export async function claimMachineSets(
  client: KubeApi,
  informers: SharedInformers,
  mcd: MachineDeployment,
  deleting: boolean,
): Promise<MachineSet[]> {
  const owned = await claim({
    client,
    ownerRes: MachineDeploymentResource,
    childRes: MachineSetResource,
    children: informers.machineSets,
    owner: {
      apiVersion: API_VERSION,
      kind: MachineDeploymentResource.kind,
      name: mcd.metadata.name ?? '',
      uid: mcd.metadata.uid ?? '',
      deleting,
    },
    namespace: mcd.metadata.namespace,
    selector: mcd.spec?.selector,
  });
  return owned.map((s) => clone<MachineSet>(s));
}
