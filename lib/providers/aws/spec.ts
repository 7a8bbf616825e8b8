// The AWS provider's providerSpec: gardener's AWS provider schema (machine-controller-manager-
// provider-aws, AWSProviderSpec), field names as on the wire, so MachineClasses written for
// gardener apply unchanged. Fields outside the schema are ignored, as gardener's decoder does.
// Validation follows gardener's rules; every problem names its field (`providerSpec.<path>`).

export const CLUSTER_TAG_PREFIX = 'kubernetes.io/cluster/';
export const ROLE_TAG_PREFIX = 'kubernetes.io/role/';
/** A block device of this name is the AMI's root device. */
export const ROOT_DEVICE_NAME = '/root';

const VOLUME_TYPES = ['gp2', 'gp3', 'io1', 'st1', 'sc1', 'standard'];
const DATA_DEVICE_NAME = /^\/dev\/(sd[a-z]|xvd[a-c][a-z]?)$/;
const INTERFACE_TYPES = ['interface', 'efa', 'efa-only'];
const HTTP_TOKENS = ['required', 'optional'];
const ENABLED_DISABLED = ['enabled', 'disabled'];
const TENANCIES = ['default', 'dedicated', 'host'];
const AFFINITIES = ['default', 'host'];
const MARKET_TYPES = ['spot', 'capacity-block', 'interruptible-capacity-reservation'];
const AMD_SEV_SNP = ['enabled', 'disabled'];

export interface AwsEbs {
  deleteOnTermination?: boolean;
  encrypted?: boolean;
  iops?: number;
  throughput?: number;
  kmsKeyID?: string;
  snapshotID?: string;
  volumeSize?: number;
  volumeType?: string;
}

export interface AwsBlockDevice {
  deviceName?: string;
  noDevice?: string;
  virtualName?: string;
  ebs?: AwsEbs;
}

export interface AwsNetworkInterface {
  subnetID: string;
  securityGroupIDs: string[];
  associatePublicIPAddress?: boolean;
  deleteOnTermination?: boolean;
  description?: string;
  ipv6AddressCount?: number;
  ipv6PrefixCount?: number;
  interfaceType?: string;
  networkCardIndex?: number;
  deviceIndex?: number;
  primaryIpv6?: boolean;
}

export interface AwsCapacityReservation {
  capacityReservationPreference?: string;
  capacityReservationId?: string;
  capacityReservationResourceGroupArn?: string;
}

export interface AwsInstanceMetadataOptions {
  httpEndpoint?: string;
  httpPutResponseHopLimit?: number;
  httpTokens?: string;
  httpProtocolIpv6?: string;
}

export interface AwsCpuOptions {
  coreCount?: number;
  threadsPerCore?: number;
  amdSevSnp?: string;
}

export interface AwsPlacement {
  groupId?: string;
  tenancy?: string;
  hostId?: string;
  partitionNumber?: number;
  affinity?: string;
}

export interface AwsProviderSpec {
  ami: string;
  region: string;
  machineType: string;
  keyName?: string;
  iam: { name?: string; arn?: string };
  tags: Record<string, string>;
  blockDevices: AwsBlockDevice[];
  networkInterfaces: AwsNetworkInterface[];
  capacityReservation?: AwsCapacityReservation;
  ebsOptimized?: boolean;
  monitoring?: boolean;
  /** Deprecated by gardener in favour of instanceMarketOptions; "" means the on-demand price. */
  spotPrice?: string;
  srcAndDstChecksEnabled?: boolean;
  instanceMetadataOptions?: AwsInstanceMetadataOptions;
  cpuOptions?: AwsCpuOptions;
  placement?: AwsPlacement;
  instanceMarketOptions?: { marketType: string };
  /** The tag keys that identify the class's instances: its cluster and its role. */
  clusterTag: string;
  roleTag: string;
}

export type AwsSpecResult = { ok: true; spec: AwsProviderSpec } | { ok: false; problems: string[] };

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Reads typed fields of one object of the spec, collecting problems that name the field. */
class Reader {
  constructor(
    private readonly problems: string[],
    readonly path: string,
    readonly obj: Obj,
  ) {}

  private bad(key: string, want: string): void {
    this.problems.push(
      `${this.path}.${key}: Invalid value: must be ${want}, got ${JSON.stringify(this.obj[key])}`,
    );
  }

  string(key: string): string | undefined {
    const v = this.obj[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v === 'string') return v;
    this.bad(key, 'a string');
    return undefined;
  }

  bool(key: string): boolean | undefined {
    const v = this.obj[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v === 'boolean') return v;
    this.bad(key, 'true or false');
    return undefined;
  }

  int(key: string): number | undefined {
    const v = this.obj[key];
    if (v === undefined || v === null) return undefined;
    if (typeof v === 'number' && Number.isInteger(v)) return v;
    this.bad(key, 'an integer');
    return undefined;
  }

  object(key: string): Reader | undefined {
    const v = this.obj[key];
    if (v === undefined || v === null) return undefined;
    if (isObj(v)) return new Reader(this.problems, `${this.path}.${key}`, v);
    this.bad(key, 'an object');
    return undefined;
  }

  list(key: string): Reader[] | undefined {
    const v = this.obj[key];
    if (v === undefined || v === null) return undefined;
    if (!Array.isArray(v)) {
      this.bad(key, 'a list');
      return undefined;
    }
    const out: Reader[] = [];
    v.forEach((item: unknown, i) => {
      if (isObj(item)) out.push(new Reader(this.problems, `${this.path}.${key}[${i}]`, item));
      else this.problems.push(`${this.path}.${key}[${i}]: Invalid value: must be an object`);
    });
    return out;
  }

  strings(key: string): string[] | undefined {
    const v = this.obj[key];
    if (v === undefined || v === null) return undefined;
    if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) {
      this.bad(key, 'a list of strings');
      return undefined;
    }
    return v as string[];
  }

  stringMap(key: string): Record<string, string> | undefined {
    const v = this.obj[key];
    if (v === undefined || v === null) return undefined;
    if (!isObj(v) || Object.values(v).some((s) => typeof s !== 'string')) {
      this.bad(key, 'a map of strings');
      return undefined;
    }
    return v as Record<string, string>;
  }

  oneOf(key: string, allowed: readonly string[]): string | undefined {
    const v = this.string(key);
    if (v !== undefined && !allowed.includes(v)) {
      this.problems.push(
        `${this.path}.${key}: Unsupported value: ${JSON.stringify(v)}: supported values: ${allowed.map((a) => `"${a}"`).join(', ')}`,
      );
    }
    return v;
  }

  required(key: string, what: string): void {
    this.problems.push(`${this.path}.${key}: Required value: ${what}`);
  }

  invalid(key: string, what: string): void {
    this.problems.push(`${this.path}${key === '' ? '' : `.${key}`}: Invalid value: ${what}`);
  }
}

/** Copies the defined entries of o (exactOptionalPropertyTypes: no `key: undefined`). */
function defined<T extends object>(o: { [K in keyof T]: T[K] | undefined }): T {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Obj)[k] = v;
  return out as T;
}

function parseBlockDevices(list: Reader[]): AwsBlockDevice[] {
  let roots = 0;
  const seen = new Map<string, number>();
  const out = list.map((r) => {
    const deviceName = r.string('deviceName');
    const ebsReader = r.object('ebs');
    if (deviceName === ROOT_DEVICE_NAME) roots++;
    else if (list.length > 1 && !DATA_DEVICE_NAME.test(deviceName ?? '')) {
      r.invalid(
        'deviceName',
        `${JSON.stringify(deviceName ?? '')} does not match ${DATA_DEVICE_NAME.source} (a data device; the root device is "${ROOT_DEVICE_NAME}")`,
      );
    }
    seen.set(deviceName ?? '', (seen.get(deviceName ?? '') ?? 0) + 1);
    const ebs = defined<AwsEbs>({
      deleteOnTermination: ebsReader?.bool('deleteOnTermination'),
      encrypted: ebsReader?.bool('encrypted'),
      iops: ebsReader?.int('iops'),
      throughput: ebsReader?.int('throughput'),
      kmsKeyID: ebsReader?.string('kmsKeyID'),
      snapshotID: ebsReader?.string('snapshotID'),
      volumeSize: ebsReader?.int('volumeSize'),
      volumeType: ebsReader?.string('volumeType'),
    });
    if (!VOLUME_TYPES.includes(ebs.volumeType ?? '')) {
      r.required('ebs.volumeType', `one of ${VOLUME_TYPES.join(', ')}`);
    }
    if ((ebs.volumeSize ?? 0) <= 0) r.required('ebs.volumeSize', 'a volume size in GiB greater than 0');
    if ((ebs.iops ?? 0) < 0 || (ebs.volumeType === 'io1' && (ebs.iops ?? 0) === 0)) {
      r.required('ebs.iops', 'a positive number of IOPS (required for io1)');
    }
    if (ebs.throughput !== undefined && ebs.throughput <= 0) {
      r.invalid('ebs.throughput', `${ebs.throughput}: must be positive`);
    }
    return defined<AwsBlockDevice>({
      deviceName,
      noDevice: r.string('noDevice'),
      virtualName: r.string('virtualName'),
      ebs,
    });
  });
  const path = list[0]?.path.replace(/\[0\]$/, '') ?? 'providerSpec.blockDevices';
  if (roots > 1 || (roots === 0 && list.length > 1)) {
    list[0]?.invalid('', `exactly one device of ${path} must be "${ROOT_DEVICE_NAME}" (the root device)`);
  }
  for (const [name, n] of seen) {
    if (n > 1)
      list[0]?.invalid('', `device name "${name}" appears ${n} times in ${path}; names must be unique`);
  }
  return out;
}

function parseNetworkInterfaces(spec: Reader): AwsNetworkInterface[] {
  const list = spec.list('networkInterfaces') ?? [];
  if (list.length === 0) spec.required('networkInterfaces', 'at least one network interface');
  return list.map((r) => {
    const subnetID = r.string('subnetID') ?? '';
    const securityGroupIDs = r.strings('securityGroupIDs') ?? [];
    if (subnetID === '') r.required('subnetID', 'the subnet of the interface');
    if (securityGroupIDs.length === 0) r.required('securityGroupIDs', 'at least one security group');
    securityGroupIDs.forEach((g, i) => {
      if (g === '') r.required(`securityGroupIDs[${i}]`, 'a security group id (it is empty)');
    });
    const ni = defined<AwsNetworkInterface>({
      subnetID,
      securityGroupIDs,
      associatePublicIPAddress: r.bool('associatePublicIPAddress'),
      deleteOnTermination: r.bool('deleteOnTermination'),
      description: r.string('description'),
      ipv6AddressCount: r.int('ipv6AddressCount'),
      ipv6PrefixCount: r.int('ipv6PrefixCount'),
      interfaceType: r.oneOf('interfaceType', INTERFACE_TYPES),
      networkCardIndex: r.int('networkCardIndex'),
      deviceIndex: r.int('deviceIndex'),
      primaryIpv6: r.bool('primaryIpv6'),
    });
    if ((ni.deviceIndex ?? 0) < 0) r.invalid('deviceIndex', `${ni.deviceIndex}: must be >= 0`);
    if ((ni.networkCardIndex ?? 0) < 0) r.invalid('networkCardIndex', `${ni.networkCardIndex}: must be >= 0`);
    return ni;
  });
}

/** The tag keys gardener identifies a class's instances by (keys containing the prefixes). */
export function clusterAndRoleTags(tags: Readonly<Record<string, string>>): {
  cluster?: string;
  role?: string;
} {
  let cluster: string | undefined;
  let role: string | undefined;
  for (const key of Object.keys(tags).sort()) {
    if (key.includes(CLUSTER_TAG_PREFIX)) cluster ??= key;
    else if (key.includes(ROLE_TAG_PREFIX)) role ??= key;
  }
  return defined({ cluster, role });
}

/** Parses and validates a MachineClass's providerSpec for the AWS provider. */
export function parseAwsProviderSpec(raw: unknown): AwsSpecResult {
  const problems: string[] = [];
  if (!isObj(raw)) return { ok: false, problems: ['providerSpec: Invalid value: must be an object'] };
  const r = new Reader(problems, 'providerSpec', raw);

  const ami = r.string('ami') ?? '';
  const region = r.string('region') ?? '';
  const machineType = r.string('machineType') ?? '';
  if (ami === '') r.required('ami', 'the AMI (image id) of the instances is required');
  if (region === '') r.required('region', 'the AWS region is required');
  if (machineType === '') r.required('machineType', 'the instance type is required');

  const iamReader = r.object('iam');
  const iam = defined<{ name?: string; arn?: string }>({
    name: iamReader?.string('name'),
    arn: iamReader?.string('arn'),
  });
  if ((iam.name ?? '') === '' && (iam.arn ?? '') === '') {
    r.required('iam', 'exactly one of iam.name and iam.arn (the instance profile)');
  } else if ((iam.name ?? '') !== '' && (iam.arn ?? '') !== '') {
    r.invalid('iam', 'exactly one of iam.name and iam.arn may be set, not both');
  }

  const tags = r.stringMap('tags') ?? {};
  const { cluster, role } = clusterAndRoleTags(tags);
  if (cluster === undefined) r.required('tags', `a tag of the form ${CLUSTER_TAG_PREFIX}<cluster>`);
  if (role === undefined) r.required('tags', `a tag of the form ${ROLE_TAG_PREFIX}<role>`);

  const blockDevices = parseBlockDevices(r.list('blockDevices') ?? []);
  const networkInterfaces = parseNetworkInterfaces(r);

  const cr = r.object('capacityReservation');
  const capacityReservation =
    cr === undefined
      ? undefined
      : defined<AwsCapacityReservation>({
          capacityReservationPreference: cr.string('capacityReservationPreference'),
          capacityReservationId: cr.string('capacityReservationId'),
          capacityReservationResourceGroupArn: cr.string('capacityReservationResourceGroupArn'),
        });
  if (capacityReservation !== undefined) {
    const byTarget =
      capacityReservation.capacityReservationId !== undefined ||
      capacityReservation.capacityReservationResourceGroupArn !== undefined;
    if ((capacityReservation.capacityReservationPreference ?? '') !== '' && byTarget) {
      r.invalid(
        'capacityReservation',
        'capacityReservationPreference cannot be set together with capacityReservationId or capacityReservationResourceGroupArn',
      );
    } else if (
      capacityReservation.capacityReservationId !== undefined &&
      capacityReservation.capacityReservationResourceGroupArn !== undefined
    ) {
      r.invalid(
        'capacityReservation',
        'only one of capacityReservationId and capacityReservationResourceGroupArn may be set',
      );
    }
  }

  const md = r.object('instanceMetadataOptions');
  const instanceMetadataOptions =
    md === undefined
      ? undefined
      : defined<AwsInstanceMetadataOptions>({
          httpEndpoint: md.oneOf('httpEndpoint', ENABLED_DISABLED),
          httpPutResponseHopLimit: md.int('httpPutResponseHopLimit'),
          httpTokens: md.oneOf('httpTokens', HTTP_TOKENS),
          httpProtocolIpv6: md.oneOf('httpProtocolIpv6', ENABLED_DISABLED),
        });
  const hops = instanceMetadataOptions?.httpPutResponseHopLimit;
  if (hops !== undefined && (hops < 0 || hops > 64)) {
    md?.invalid('httpPutResponseHopLimit', `${hops}: must be between 0 and 64`);
  }

  const cpu = r.object('cpuOptions');
  const cpuOptions =
    cpu === undefined
      ? undefined
      : defined<AwsCpuOptions>({
          coreCount: cpu.int('coreCount'),
          threadsPerCore: cpu.int('threadsPerCore'),
          amdSevSnp: cpu.oneOf('amdSevSnp', AMD_SEV_SNP),
        });
  if (cpuOptions !== undefined && cpuOptions.amdSevSnp === undefined) {
    if (cpuOptions.coreCount === undefined) cpu?.required('coreCount', 'the number of CPU cores');
    if (cpuOptions.threadsPerCore === undefined) cpu?.required('threadsPerCore', 'threads per core (1 or 2)');
  }
  if (cpuOptions?.threadsPerCore !== undefined && ![1, 2].includes(cpuOptions.threadsPerCore)) {
    cpu?.invalid('threadsPerCore', `${cpuOptions.threadsPerCore}: must be 1 or 2`);
  }

  const pl = r.object('placement');
  const placement =
    pl === undefined
      ? undefined
      : defined<AwsPlacement>({
          groupId: pl.string('groupId'),
          tenancy: pl.oneOf('tenancy', TENANCIES),
          hostId: pl.string('hostId'),
          partitionNumber: pl.int('partitionNumber'),
          affinity: pl.oneOf('affinity', AFFINITIES),
        });
  if (placement?.hostId !== undefined && placement.tenancy !== 'host') {
    pl?.invalid('hostId', 'hostId can only be set when tenancy is "host"');
  }
  if (placement?.partitionNumber !== undefined && placement.partitionNumber < 1) {
    pl?.invalid('partitionNumber', `${placement.partitionNumber}: must be >= 1`);
  }

  const mo = r.object('instanceMarketOptions');
  let instanceMarketOptions: { marketType: string } | undefined;
  if (mo !== undefined) {
    const marketType = mo.string('marketType') ?? '';
    if (!MARKET_TYPES.includes(marketType)) {
      mo.invalid('marketType', `${JSON.stringify(marketType)}: must be one of ${MARKET_TYPES.join(', ')}`);
    }
    instanceMarketOptions = { marketType };
  }

  const scalars = {
    keyName: r.string('keyName'),
    ebsOptimized: r.bool('ebsOptimized'),
    monitoring: r.bool('monitoring'),
    spotPrice: r.string('spotPrice'),
    srcAndDstChecksEnabled: r.bool('srcAndDstChecksEnabled'),
  };

  if (problems.length > 0) return { ok: false, problems };
  return {
    ok: true,
    spec: defined<AwsProviderSpec>({
      ami,
      region,
      machineType,
      iam,
      tags,
      blockDevices,
      networkInterfaces,
      capacityReservation,
      ...scalars,
      instanceMetadataOptions,
      cpuOptions,
      placement,
      instanceMarketOptions,
      clusterTag: cluster ?? '',
      roleTag: role ?? '',
    }),
  };
}
