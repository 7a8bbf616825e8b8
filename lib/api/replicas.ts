// The one reading of `spec.replicas` for MachineSets and MachineDeployments. gardener MCM declares
// the field as a plain int32 (`json:"replicas,omitempty"`), so an absent value is 0 there, and our
// CRDs default it to 0: the controllers, the autoscaler server and validation all read it here,
// so none of them can assume another default (a missing value read as 1 made TargetSize report a
// node that no controller would create).

/** spec.replicas of a MachineSet or MachineDeployment; absent means 0. */
export function replicasOf(obj: {
  readonly spec?: { readonly replicas?: number | undefined } | undefined;
}): number {
  return obj.spec?.replicas ?? 0;
}
