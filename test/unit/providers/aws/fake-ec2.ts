// EC2 in memory for the driver's unit tests: instances, the filters the driver uses, and hooks
// to inject failures.

import type {
  AssignIpv6AddressesCommandInput,
  DescribeInstancesCommandInput,
  DescribeInstancesCommandOutput,
  Instance,
  RunInstancesCommandInput,
  RunInstancesCommandOutput,
  ModifyInstanceAttributeCommandInput,
  ModifyNetworkInterfaceAttributeCommandInput,
  TerminateInstancesCommandInput,
  TerminateInstancesCommandOutput,
} from '@aws-sdk/client-ec2';

import type { Ec2Api } from '../../../../lib/providers/aws/client.js';

const meta = { $metadata: {} };
export function ec2Error(code: string, status: number): Error {
  return Object.assign(new Error(`${code} happened`), { name: code, $metadata: { httpStatusCode: status } });
}

/** EC2 in memory: instances, the filters the driver uses, and hooks to inject failures. */
export class FakeEc2 implements Ec2Api {
  instances: Instance[] = [];
  runs: RunInstancesCommandInput[] = [];
  describes: DescribeInstancesCommandInput[] = [];
  terminated: string[] = [];
  modified: string[] = [];
  modifiedInterfaces: string[] = [];
  assigned: { eni: string; prefixes: number }[] = [];
  /** Instance ids DescribeInstances does not show yet (EC2's eventual consistency). */
  hidden = new Set<string>();
  /** Called before a RunInstances is executed; may throw (nothing started). */
  beforeRun: ((n: number) => void) | undefined;
  /** Called after a RunInstances was executed; may throw (the answer is lost). */
  afterRun: ((n: number) => void) | undefined;
  terminate: ((ids: string[]) => TerminateInstancesCommandOutput) | undefined;
  pageSize = 1000;
  private next = 1;

  add(i: Partial<Instance>): Instance {
    const inst: Instance = {
      InstanceId: `i-${(this.next++).toString(16).padStart(8, '0')}`,
      State: { Name: 'running' },
      PrivateDnsName: `ip-10-0-0-${this.next}.eu-west-1.compute.internal`,
      PrivateIpAddress: `10.0.0.${this.next}`,
      LaunchTime: new Date(1_000_000 + this.next),
      ...i,
    };
    this.instances.push(inst);
    return inst;
  }

  runInstances(input: RunInstancesCommandInput): Promise<RunInstancesCommandOutput> {
    this.runs.push(input);
    this.beforeRun?.(this.runs.length);
    const inst = this.add({
      InstanceType: input.InstanceType,
      Tags: input.TagSpecifications?.find((t) => t.ResourceType === 'instance')?.Tags ?? [],
    });
    this.afterRun?.(this.runs.length);
    return Promise.resolve({ ...meta, Instances: [inst] });
  }

  describeInstances(input: DescribeInstancesCommandInput): Promise<DescribeInstancesCommandOutput> {
    this.describes.push(input);
    if (input.InstanceIds !== undefined) {
      const found = this.instances.filter((i) => input.InstanceIds?.includes(i.InstanceId ?? ''));
      if (found.length === 0) return Promise.reject(ec2Error('InvalidInstanceID.NotFound', 400));
      return Promise.resolve({ ...meta, Reservations: [{ Instances: found }] });
    }
    const matches = this.instances.filter(
      (i) =>
        !this.hidden.has(i.InstanceId ?? '') &&
        (input.Filters ?? []).every((f) => {
          const values = f.Values ?? [];
          if (f.Name === 'tag-key') return i.Tags?.some((t) => values.includes(t.Key ?? ''));
          if (f.Name === 'instance-state-name') return values.includes(i.State?.Name ?? '');
          if (f.Name === 'instance-id') return values.includes(i.InstanceId ?? '');
          if (f.Name?.startsWith('tag:') === true) {
            return i.Tags?.some((t) => t.Key === f.Name?.slice(4) && values.includes(t.Value ?? ''));
          }
          return false;
        }),
    );
    const start = Number(input.NextToken ?? '0');
    const page = matches.slice(start, start + this.pageSize);
    const more = start + this.pageSize < matches.length;
    return Promise.resolve({
      ...meta,
      Reservations: page.map((i) => ({ Instances: [i] })),
      ...(more ? { NextToken: String(start + this.pageSize) } : {}),
    });
  }

  describeImages(): Promise<{ $metadata: object; Images: { ImageId: string; RootDeviceName: string }[] }> {
    return Promise.resolve({ ...meta, Images: [{ ImageId: 'ami-123456', RootDeviceName: '/dev/xvda' }] });
  }

  terminateInstances(input: TerminateInstancesCommandInput): Promise<TerminateInstancesCommandOutput> {
    const ids = input.InstanceIds ?? [];
    if (this.terminate !== undefined) return Promise.resolve(this.terminate(ids));
    const known = this.instances.filter((i) => ids.includes(i.InstanceId ?? ''));
    if (known.length === 0) return Promise.reject(ec2Error('InvalidInstanceID.NotFound', 400));
    this.terminated.push(...ids);
    const out = known.map((i) => ({ InstanceId: i.InstanceId, PreviousState: { Name: i.State?.Name } }));
    for (const i of known) i.State = { Name: 'terminated' };
    return Promise.resolve({ ...meta, TerminatingInstances: out } as TerminateInstancesCommandOutput);
  }

  modifyInstanceAttribute(input: ModifyInstanceAttributeCommandInput): Promise<void> {
    this.modified.push(input.InstanceId ?? '');
    const i = this.instances.find((x) => x.InstanceId === input.InstanceId);
    if (i !== undefined) i.SourceDestCheck = false;
    return Promise.resolve();
  }

  modifyNetworkInterfaceAttribute(input: ModifyNetworkInterfaceAttributeCommandInput): Promise<void> {
    this.modifiedInterfaces.push(input.NetworkInterfaceId ?? '');
    for (const i of this.instances) {
      for (const ni of i.NetworkInterfaces ?? []) {
        if (ni.NetworkInterfaceId === input.NetworkInterfaceId) ni.SourceDestCheck = false;
      }
    }
    return Promise.resolve();
  }

  assignIpv6Addresses(input: AssignIpv6AddressesCommandInput): Promise<void> {
    this.assigned.push({ eni: input.NetworkInterfaceId ?? '', prefixes: input.Ipv6PrefixCount ?? 0 });
    for (const i of this.instances) {
      for (const ni of i.NetworkInterfaces ?? []) {
        if (ni.NetworkInterfaceId !== input.NetworkInterfaceId) continue;
        const add = Array.from({ length: input.Ipv6PrefixCount ?? 0 }, (_, k) => ({
          Ipv6Prefix: `2001:db8:${k}::/80`,
        }));
        ni.Ipv6Prefixes = [...(ni.Ipv6Prefixes ?? []), ...add];
      }
    }
    return Promise.resolve();
  }

  /** The driver never asks for spot prices (the provider's prices do, in the background). */
  describeSpotPriceHistory(): Promise<never> {
    return Promise.reject(new Error('the driver asked for spot prices'));
  }

  /** Nor for status checks (the provider's health poll does, in the background). */
  describeInstanceStatus(): Promise<never> {
    return Promise.reject(new Error('the driver asked for instance status checks'));
  }

  destroyed = 0;
  destroy(): void {
    this.destroyed++;
  }
}
