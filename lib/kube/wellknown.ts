/** The well-known labels of a Node (kubelet and cloud provider), stable and beta variants. */
export const WellKnownLabel = {
  Hostname: 'kubernetes.io/hostname',
  Arch: 'kubernetes.io/arch',
  OS: 'kubernetes.io/os',
  InstanceType: 'node.kubernetes.io/instance-type',
  Region: 'topology.kubernetes.io/region',
  Zone: 'topology.kubernetes.io/zone',
  BetaArch: 'beta.kubernetes.io/arch',
  BetaOS: 'beta.kubernetes.io/os',
  BetaInstanceType: 'beta.kubernetes.io/instance-type',
  BetaRegion: 'failure-domain.beta.kubernetes.io/region',
  BetaZone: 'failure-domain.beta.kubernetes.io/zone',
} as const;
