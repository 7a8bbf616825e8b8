// What initialising an instance means for a class (pure): gardener's InitializeMachine work, read
// off the instance as DescribeInstances shows it. The driver does the writes (driver.ts).

import type { Instance, InstanceNetworkInterface } from '@aws-sdk/client-ec2';

import type { AwsProviderSpec } from './spec.js';

/** Network interfaces whose source/destination check cannot be changed (gardener skips them). */
const EFA_INTERFACE_TYPES: ReadonlySet<string> = new Set(['efa', 'efa-only']);

/**
 * The interfaces of an instance whose source/destination check can be changed (EFA ones cannot),
 * undefined when the answer lists no interfaces.
 */
export function checkableInterfaces(i: Instance): InstanceNetworkInterface[] | undefined {
  const all = i.NetworkInterfaces ?? [];
  if (all.length === 0) return undefined;
  return all.filter((ni) => !EFA_INTERFACE_TYPES.has(ni.InterfaceType ?? ''));
}

/**
 * The instance's interfaces that have fewer IPv6 prefixes than their entry in the class asks for
 * (`ipv6PrefixCount`, matched by the attachment's device index, as gardener does), with how many
 * are missing.
 */
export function missingIpv6Prefixes(
  spec: AwsProviderSpec,
  i: Instance,
): { ni: InstanceNetworkInterface; missing: number }[] {
  const out: { ni: InstanceNetworkInterface; missing: number }[] = [];
  for (const ni of i.NetworkInterfaces ?? []) {
    const index = ni.Attachment?.DeviceIndex;
    if (index === undefined) continue;
    const want = spec.networkInterfaces[index]?.ipv6PrefixCount;
    const have = ni.Ipv6Prefixes?.length ?? 0;
    if (want !== undefined && have < want) out.push({ ni, missing: want - have });
  }
  return out;
}

/** What initialisation is still to do on an instance, as a phrase; undefined when none. */
export function uninitialized(spec: AwsProviderSpec, i: Instance): string | undefined {
  if (spec.srcAndDstChecksEnabled === false) {
    const interfaces = checkableInterfaces(i);
    const on =
      interfaces === undefined
        ? i.SourceDestCheck === true
        : interfaces.some((ni) => ni.SourceDestCheck === true);
    if (on) return 'still has its source/destination check enabled (srcAndDstChecksEnabled: false)';
  }
  const missing = missingIpv6Prefixes(spec, i)[0];
  if (missing !== undefined) {
    return `has ${missing.missing} IPv6 prefixes fewer than ipv6PrefixCount on network interface ${missing.ni.NetworkInterfaceId ?? ''}`;
  }
  return undefined;
}
