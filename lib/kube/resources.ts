/** Identifies an API resource: where it is served and whether it lives in a namespace. */
export interface ResourceType {
  /** API group; '' for the core group. */
  group: string;
  version: string;
  plural: string;
  kind: string;
  namespaced: boolean;
}

export const CoreResources = {
  namespaces: { group: '', version: 'v1', plural: 'namespaces', kind: 'Namespace', namespaced: false },
  nodes: { group: '', version: 'v1', plural: 'nodes', kind: 'Node', namespaced: false },
  pods: { group: '', version: 'v1', plural: 'pods', kind: 'Pod', namespaced: true },
  events: { group: '', version: 'v1', plural: 'events', kind: 'Event', namespaced: true },
  secrets: { group: '', version: 'v1', plural: 'secrets', kind: 'Secret', namespaced: true },
  configMaps: { group: '', version: 'v1', plural: 'configmaps', kind: 'ConfigMap', namespaced: true },
  persistentVolumes: {
    group: '',
    version: 'v1',
    plural: 'persistentvolumes',
    kind: 'PersistentVolume',
    namespaced: false,
  },
  persistentVolumeClaims: {
    group: '',
    version: 'v1',
    plural: 'persistentvolumeclaims',
    kind: 'PersistentVolumeClaim',
    namespaced: true,
  },
  leases: { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', kind: 'Lease', namespaced: true },
  podDisruptionBudgets: {
    group: 'policy',
    version: 'v1',
    plural: 'poddisruptionbudgets',
    kind: 'PodDisruptionBudget',
    namespaced: true,
  },
  volumeAttachments: {
    group: 'storage.k8s.io',
    version: 'v1',
    plural: 'volumeattachments',
    kind: 'VolumeAttachment',
    namespaced: false,
  },
  customResourceDefinitions: {
    group: 'apiextensions.k8s.io',
    version: 'v1',
    plural: 'customresourcedefinitions',
    kind: 'CustomResourceDefinition',
    namespaced: false,
  },
} as const satisfies Record<string, ResourceType>;

export function apiVersionOf(res: ResourceType): string {
  return res.group === '' ? res.version : `${res.group}/${res.version}`;
}

/** Short label for metrics and logs: "pods", "machines.machine.sapcloud.io". */
export function resourceLabel(res: ResourceType): string {
  return res.group === '' ? res.plural : `${res.plural}.${res.group}`;
}

/** The REST path of a collection or object, optionally of a subresource. */
export function resourcePath(
  res: ResourceType,
  namespace?: string,
  name?: string,
  subresource?: string,
): string {
  const base = res.group === '' ? `/api/${res.version}` : `/apis/${res.group}/${res.version}`;
  let p = base;
  if (res.namespaced && namespace !== undefined && namespace !== '') {
    p += `/namespaces/${encodeURIComponent(namespace)}`;
  }
  p += `/${res.plural}`;
  if (name !== undefined) {
    p += `/${encodeURIComponent(name)}`;
    if (subresource !== undefined) p += `/${subresource}`;
  }
  return p;
}
