// Persistent volumes for drain scenarios: a CSI PersistentVolume and its claim, bound to each
// other from the start (no volume controller runs in these control planes; a drain reads the
// claim's volumeName and the volume's CSI handle).

import { CoreResources } from '../../../lib/kube/resources.js';
import type { PersistentVolume, PersistentVolumeClaim } from '../../../lib/kube/types.js';
import { NS, type LifecycleEnv } from './lifecycle.js';

export interface BoundVolume {
  /** The PersistentVolume's name. */
  pv: string;
  /** The claim's name, in NS. */
  claim: string;
  /** The CSI driver and the volume's handle (what the cloud calls it). */
  driver: string;
  handle: string;
}

export async function createBoundCsiVolume(env: LifecycleEnv, v: BoundVolume): Promise<void> {
  await env.client.create<PersistentVolume>(CoreResources.persistentVolumes, {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name: v.pv },
    spec: {
      capacity: { storage: '1Gi' },
      accessModes: ['ReadWriteOnce'],
      csi: { driver: v.driver, volumeHandle: v.handle },
      claimRef: { namespace: NS, name: v.claim },
      storageClassName: '',
    },
  });
  await env.client.create<PersistentVolumeClaim>(CoreResources.persistentVolumeClaims, {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: { name: v.claim, namespace: NS },
    spec: {
      volumeName: v.pv,
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: '1Gi' } },
      storageClassName: '',
    },
  });
}
