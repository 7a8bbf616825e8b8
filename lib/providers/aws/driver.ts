// The AWS EC2 driver: gardener's AWS provider behaviour on @aws-sdk/client-ec2, where it is sound.
// An instance belongs to a machine through its `Name` tag (plus the class's cluster tag); the
// providerID `aws:///<region>/<instance-id>` names it once known, and lookups then go by id.

import { createHash } from 'node:crypto';

import type { Filter, Instance, RunInstancesCommandInput } from '@aws-sdk/client-ec2';

import type { NodeAddress } from '../../api/types.js';
import { MachineError, type MachineErrorVm } from '../../driver/codes.js';
import type {
  CreateMachineRequest,
  CreateMachineResponse,
  DeleteMachineRequest,
  DeleteMachineResponse,
  Driver,
  GetMachineStatusRequest,
  GetMachineStatusResponse,
  GetVolumeIDsRequest,
  GetVolumeIDsResponse,
  InitializeMachineRequest,
  InitializeMachineResponse,
  ListMachinesRequest,
  ListMachinesResponse,
  MachineRequest,
} from '../../driver/driver.js';
import { RealClock, type Clock } from '../../kube/clock.js';
import { FencedError } from '../../kube/errors.js';
import type { WriteFence } from '../../kube/fence.js';
import type { Secret } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { sdkEc2Api, type Ec2Api, type Ec2ApiFactory } from './client.js';
import {
  USER_DATA_PROBLEM,
  credentialsFingerprint,
  readCredentials,
  readUserData,
  secretValues,
} from './credentials.js';
import {
  THROTTLING_ERROR_CODES,
  awsErrorInfo,
  INSTANCE_NOT_FOUND_CODES,
  launchFailure,
  toMachineError,
} from './errors.js';
import { checkableInterfaces, missingIpv6Prefixes, uninitialized } from './initialize.js';
import { LaunchPacer } from './pacer.js';
import { AWS_PLACEMENT_ANNOTATION, NAME_TAG, needsRootDeviceName, runInstancesInput } from './launch.js';
import { InstanceLookup } from './lookup.js';
import {
  OFFERING_CAPACITY_CODES,
  UnavailableCause,
  describeOffering,
  offeringOfSpec,
  type UnavailableOfferings,
} from './offerings.js';
import { parseAwsProviderSpec, type AwsProviderSpec } from './spec.js';

export const AWS_PROVIDER = 'AWS';
export const AWS_PROVIDER_ID_PREFIX = 'aws://';

/** The states of an instance that still exists (gardener's ListMachines filter). */
export const LIVE_STATES = ['pending', 'running', 'stopping', 'stopped'];
const GONE_STATES: ReadonlySet<string> = new Set(['shutting-down', 'terminated']);
/** The CSI driver of EBS volumes. */
export const EBS_CSI_DRIVER = 'ebs.csi.aws.com';
/** How many instances one DescribeInstances page may hold (EC2's maximum). */
const PAGE_SIZE = 1000;
/** RunInstances attempts per CreateMachine (see AwsDriver.launch). */
const LAUNCH_ATTEMPTS = 5;
/**
 * How long a GetMachineStatus that found no instance for a machine stands in for CreateMachine's
 * own lookup. The machine controller calls the two back to back for a machine without a VM; within
 * this window only another process could have started one, and the leader fence rules that out.
 */
const FRESH_ABSENCE_MS = 2_000;
/**
 * How long CreateMachine waits for a started instance to show in DescribeInstances (EC2 is
 * eventually consistent: a new instance may be missing from it for seconds), polling with backoff
 * through the coalesced lookups. After that it answers anyway; the machine records the instance
 * and its initialisation is retried until it shows.
 */
const VISIBILITY_WAIT_MS = 60_000;
/** The longest pause between two visibility lookups, and the most lookups. */
const VISIBILITY_MAX_PAUSE_MS = 5_000;
const VISIBILITY_MAX_LOOKUPS = 20;
/** How long an instance CreateMachine saw stands in for InitializeMachine's lookup right after. */
const FRESH_SIGHTING_MS = 10_000;
/**
 * How long an instance lookup waits for others to share its DescribeInstances (see lookup.ts):
 * the lookups of a scale-up's machines, which arrive spread over seconds, then cost a few calls
 * instead of one or two per machine.
 */
const LOOKUP_GATHER_MS = 1_000;
/** An EC2 client not used for this long is closed (e.g. after its credentials were rotated). */
const CLIENT_IDLE_MS = 30 * 60_000;

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(new MachineError('Canceled', 'the call was cancelled'));
      return;
    }
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', cancel);
    };
    const cancel = (): void => {
      done();
      reject(new MachineError('Canceled', 'the call was cancelled'));
    };
    const timer = setTimeout(() => {
      done();
      resolve();
    }, ms);
    signal?.addEventListener('abort', cancel);
  });
}

export function providerIDOf(region: string, instanceId: string): string {
  return `${AWS_PROVIDER_ID_PREFIX}/${region}/${instanceId}`;
}

/**
 * Region (or zone, as a kubelet registers it) and instance id of a providerID such as
 * `aws:///eu-west-1/i-0abc` or `aws:///eu-west-1a/i-0abc`; undefined when it is not one.
 */
export function parseProviderID(providerID: string): { location: string; instanceId: string } | undefined {
  if (!providerID.startsWith(AWS_PROVIDER_ID_PREFIX)) return undefined;
  const parts = providerID
    .slice(AWS_PROVIDER_ID_PREFIX.length)
    .split('/')
    .filter((p) => p !== '');
  const instanceId = parts[parts.length - 1];
  if (!instanceId?.startsWith('i-')) return undefined;
  return { location: parts.length > 1 ? (parts[0] ?? '') : '', instanceId };
}

/** The region of a location that may be a zone (`eu-west-1a` → `eu-west-1`). */
function regionOfLocation(location: string): string {
  return /^[a-z]{2}(-[a-z]+)+-\d+[a-z]$/.test(location) ? location.slice(0, -1) : location;
}

const tagValue = (i: Instance, key: string): string | undefined => i.Tags?.find((t) => t.Key === key)?.Value;

function isGone(i: Instance): boolean {
  return GONE_STATES.has(i.State?.Name ?? '');
}

function addressesOf(i: Instance): NodeAddress[] {
  const out: NodeAddress[] = [];
  if ((i.PrivateIpAddress ?? '') !== '') out.push({ type: 'InternalIP', address: i.PrivateIpAddress ?? '' });
  if ((i.PrivateDnsName ?? '') !== '') {
    out.push({ type: 'InternalDNS', address: i.PrivateDnsName ?? '' });
    out.push({ type: 'Hostname', address: i.PrivateDnsName ?? '' });
  }
  if ((i.PublicIpAddress ?? '') !== '') out.push({ type: 'ExternalIP', address: i.PublicIpAddress ?? '' });
  if ((i.PublicDnsName ?? '') !== '') out.push({ type: 'ExternalDNS', address: i.PublicDnsName ?? '' });
  return out;
}

/** Oldest first, so that of two instances of one machine the first one started is kept. */
function byLaunchTime(a: Instance, b: Instance): number {
  const t = (i: Instance): number => i.LaunchTime?.getTime() ?? 0;
  return t(a) - t(b) || (a.InstanceId ?? '').localeCompare(b.InstanceId ?? '');
}

/** Every instance matching the filters, all pages. */
async function describeAll(
  api: Ec2Api,
  input: { Filters: Filter[] },
  signal?: AbortSignal,
): Promise<Instance[]> {
  const out: Instance[] = [];
  let NextToken: string | undefined;
  do {
    const page = await api.describeInstances(
      { ...input, MaxResults: PAGE_SIZE, ...(NextToken === undefined ? {} : { NextToken }) },
      signal,
    );
    for (const r of page.Reservations ?? []) out.push(...(r.Instances ?? []));
    NextToken = page.NextToken === '' ? undefined : page.NextToken;
  } while (NextToken !== undefined);
  return out;
}

interface Prepared {
  api: Ec2Api;
  /** The client's coalesced lookups by id and by Name tag. */
  lookup: InstanceLookup;
  /** The pace of the client's launches (see pacer.ts). */
  pacer: LaunchPacer;
  region: string;
  /** Secret values to keep out of messages. */
  secrets: string[];
}

export interface AwsDriverOptions {
  logger: Logger;
  /** Creates the EC2 client of a region and credentials (tests pass a fake). */
  ec2?: Ec2ApiFactory;
  /** The first pause between RunInstances attempts, doubled each time (default 500 ms). */
  launchBackoffMs?: number;
  /** The first pause between visibility lookups after a launch, doubled each time (default 500 ms). */
  visibilityBackoffMs?: number;
  /** How long an instance lookup waits to share its call with others (default LOOKUP_GATHER_MS). */
  lookupGatherMs?: number;
  /** Time: freshness of lookups, idle clients, the pace of launches (tests pass a fake). */
  clock?: Clock;
  /**
   * The leader fence: every EC2 write is checked against it right before each attempt is sent
   * (undefined without leader election).
   */
  fence?: WriteFence | undefined;
  /** Told of every instance an answer is made of (the provider's prices learn subnets' zones). */
  onInstance?: (instance: Instance) => void;
  /**
   * Offerings EC2 cannot fill for now: a launch of one is refused without calling EC2, and a
   * capacity error of RunInstances marks its offering (none: every launch goes to EC2).
   */
  offerings?: UnavailableOfferings;
}

export class AwsDriver implements Driver {
  private readonly clients = new Map<
    string,
    { api: Ec2Api; lookup: InstanceLookup; pacer: LaunchPacer; usedAt: number }
  >();
  private readonly clock: Clock;
  private lastSweep = 0;
  private readonly ec2: Ec2ApiFactory;
  private readonly log: Logger;
  private readonly backoffMs: number;
  private readonly visibilityBackoffMs: number;
  private readonly lookupGatherMs: number;
  private readonly fence: WriteFence | undefined;
  private readonly onInstance: ((instance: Instance) => void) | undefined;
  private readonly offerings: UnavailableOfferings | undefined;
  /** Instances CreateMachine just saw, by machine UID (see FRESH_SIGHTING_MS). */
  private readonly seen = new Map<string, { instance: Instance; at: number }>();
  /**
   * Root device names by `<region>/<ami>` (an image's never changes): one DescribeImages per AMI,
   * shared by the creates that need it while it is under way; a failed one is not kept.
   */
  private readonly rootDevices = new Map<string, Promise<string | undefined>>();
  /** When a lookup by tags last found no instance for a machine, by machine UID (see FRESH_ABSENCE_MS). */
  private readonly absentAt = new Map<string, number>();

  constructor(opts: AwsDriverOptions) {
    this.ec2 = opts.ec2 ?? sdkEc2Api;
    this.log = opts.logger;
    this.backoffMs = opts.launchBackoffMs ?? 500;
    this.visibilityBackoffMs = opts.visibilityBackoffMs ?? 500;
    this.lookupGatherMs = opts.lookupGatherMs ?? LOOKUP_GATHER_MS;
    this.fence = opts.fence;
    this.onInstance = opts.onInstance;
    this.offerings = opts.offerings;
    this.clock = opts.clock ?? new RealClock();
  }

  private rememberSeen(uid: string | undefined, instance: Instance): void {
    if (uid === undefined || uid === '') return;
    const now = this.clock.monotonic();
    if (this.seen.size > 1000) {
      for (const [k, e] of this.seen) if (now - e.at > FRESH_SIGHTING_MS) this.seen.delete(k);
    }
    this.seen.set(uid, { instance, at: now });
  }

  /** The instance CreateMachine saw for this machine a moment ago, if it is that id (consumed once). */
  private freshlySeen(uid: string | undefined, instanceId: string): Instance | undefined {
    if (uid === undefined) return undefined;
    const e = this.seen.get(uid);
    this.seen.delete(uid);
    if (e === undefined || this.clock.monotonic() - e.at > FRESH_SIGHTING_MS) return undefined;
    return e.instance.InstanceId === instanceId ? e.instance : undefined;
  }

  private rememberAbsent(uid: string | undefined): void {
    if (uid === undefined || uid === '') return;
    const now = this.clock.monotonic();
    if (this.absentAt.size > 1000) {
      for (const [k, at] of this.absentAt) if (now - at > FRESH_ABSENCE_MS) this.absentAt.delete(k);
    }
    this.absentAt.set(uid, now);
  }

  /** Whether a lookup by tags found nothing for this machine a moment ago (consumed once). */
  private freshlyAbsent(uid: string | undefined): boolean {
    if (uid === undefined) return false;
    const at = this.absentAt.get(uid);
    this.absentAt.delete(uid);
    return at !== undefined && this.clock.monotonic() - at <= FRESH_ABSENCE_MS;
  }

  /** Closes the clients (their sockets). */
  close(): void {
    for (const c of this.clients.values()) c.api.destroy();
    this.clients.clear();
  }

  private spec(req: { machineClass: MachineRequest['machineClass'] }): AwsProviderSpec {
    const parsed = parseAwsProviderSpec(req.machineClass.providerSpec);
    if (!parsed.ok) {
      throw new MachineError(
        'InvalidArgument',
        `invalid providerSpec of MachineClass ${req.machineClass.metadata.name ?? ''}: ${parsed.problems.join('; ')}`,
      );
    }
    return parsed.spec;
  }

  private client(region: string, secret: Secret, className: string): Prepared {
    const creds = readCredentials(secret);
    if (!creds.ok) {
      throw new MachineError(
        'InvalidArgument',
        `invalid Secret of MachineClass ${className}: ${creds.problems.join('; ')}`,
      );
    }
    const key = credentialsFingerprint(region, creds.credentials);
    const now = this.clock.monotonic();
    this.closeIdleClients(now);
    let c = this.clients.get(key);
    if (c === undefined) {
      const api = this.ec2(region, creds.credentials, this.fence);
      c = {
        api,
        lookup: new InstanceLookup((Filters, signal) => describeAll(api, { Filters }, signal), {
          gatherMs: this.lookupGatherMs,
          clock: this.clock,
        }),
        pacer: new LaunchPacer(this.clock),
        usedAt: now,
      };
      this.clients.set(key, c);
    }
    c.usedAt = now;
    return { api: c.api, lookup: c.lookup, pacer: c.pacer, region, secrets: secretValues(secret) };
  }

  /**
   * Closes the clients no call used for CLIENT_IDLE_MS: those of rotated credentials (the key is
   * the credentials' fingerprint) or of classes that are gone. Looked at once a minute at most.
   */
  private closeIdleClients(now: number): void {
    if (now - this.lastSweep < 60_000) return;
    this.lastSweep = now;
    for (const [key, c] of this.clients) {
      if (now - c.usedAt < CLIENT_IDLE_MS) continue;
      c.api.destroy();
      this.clients.delete(key);
    }
  }

  /** How many EC2 clients are open (tests). */
  openClients(): number {
    return this.clients.size;
  }

  private async call<T>(p: Prepared, operation: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw toMachineError(err, operation, p.secrets);
    }
  }

  /** The instance of an id, undefined when EC2 does not know it or it is terminated. */
  private async byId(p: Prepared, instanceId: string, signal?: AbortSignal): Promise<Instance | undefined> {
    const i = await this.call(p, 'DescribeInstances', () => p.lookup.byId(instanceId, signal));
    return i === undefined || isGone(i) ? undefined : i;
  }

  /** The live instances tagged as the machine's (Name tag and the class's cluster tag), oldest first. */
  private async byName(
    p: Prepared,
    spec: AwsProviderSpec,
    machineName: string,
    signal?: AbortSignal,
  ): Promise<Instance[]> {
    const found = await this.call(p, 'DescribeInstances', () =>
      p.lookup.byName(NAME_TAG, machineName, [spec.clusterTag, spec.roleTag], LIVE_STATES, signal),
    );
    return found.filter((i) => !isGone(i)).sort(byLaunchTime);
  }

  /** The machine's instance: by the id of its providerID when it has one, else by its tags. */
  private async instanceOf(
    p: Prepared,
    spec: AwsProviderSpec,
    req: MachineRequest,
    signal?: AbortSignal,
  ): Promise<Instance | undefined> {
    const id = parseProviderID(req.machine.spec?.providerID ?? '');
    if (id !== undefined) return this.byId(p, id.instanceId, signal);
    return (await this.byName(p, spec, req.machine.metadata.name ?? '', signal))[0];
  }

  private response(region: string, i: Instance): GetMachineStatusResponse & MachineErrorVm {
    this.onInstance?.(i);
    return {
      providerID: providerIDOf(region, i.InstanceId ?? ''),
      nodeName: i.PrivateDnsName ?? '',
      addresses: addressesOf(i),
    };
  }

  private notFound(req: MachineRequest): MachineError {
    return new MachineError('NotFound', `no EC2 instance for machine ${req.machine.metadata.name ?? ''}`);
  }

  /** The region a machine's instance lives in: its providerID's, else the class's. */
  private regionOf(req: MachineRequest, spec: AwsProviderSpec | undefined): string {
    const id = parseProviderID(req.machine.spec?.providerID ?? '');
    const fromID = id === undefined ? '' : regionOfLocation(id.location);
    return fromID !== '' ? fromID : (spec?.region ?? '');
  }

  async createMachine(req: CreateMachineRequest, signal?: AbortSignal): Promise<CreateMachineResponse> {
    const spec = this.spec(req);
    const className = req.machineClass.metadata.name ?? '';
    const p = this.client(spec.region, req.secret, className);
    const userData = readUserData(req.secret);
    if (userData === undefined) {
      throw new MachineError(
        'InvalidArgument',
        `invalid Secret of MachineClass ${className}: ${USER_DATA_PROBLEM}`,
      );
    }
    if (spec.blockDevices.length === 0) {
      // gardener's provider refuses such a class when it creates (not when it validates); so do we,
      // so that a class behaves the same under both.
      throw new MachineError(
        'InvalidArgument',
        `invalid providerSpec of MachineClass ${className}: providerSpec.blockDevices: Required value: at least one block device (the root disk)`,
      );
    }
    const name = req.machine.metadata.name ?? '';
    // A retry after a lost answer or a crash finds the instance the first attempt started.
    const existing = this.freshlyAbsent(req.machine.metadata.uid)
      ? []
      : await this.byName(p, spec, name, signal);
    const first = existing[0];
    if (first !== undefined) {
      if (existing.length > 1) {
        this.log.warn(
          'machine has more than one instance; keeping the oldest (the others stay until the machine is deleted, then the orphan collection deletes them)',
          {
            machine: name,
            instances: existing.map((i) => i.InstanceId ?? ''),
          },
        );
      }
      return this.response(spec.region, first);
    }

    // Only now: a retry of a launch whose instance exists (above) is answered with it, mark or not.
    const offering = offeringOfSpec(spec);
    const mark = this.offerings?.unavailable(offering);
    if (mark !== undefined) {
      this.offerings?.refused();
      throw new MachineError(
        'ResourceExhausted',
        `AWS RunInstances not tried: ${describeOffering(offering)} is unavailable until ${new Date(mark.until).toISOString()} (${mark.reason})`,
        { retryAfterMs: mark.remainingMs },
      );
    }

    const imageKey = `${spec.region}/${spec.ami}`;
    let rootDeviceName: string | undefined;
    if (needsRootDeviceName(spec)) {
      let pending = this.rootDevices.get(imageKey);
      if (pending === undefined) {
        pending = this.rootDeviceOf(p, spec.ami, signal);
        this.rootDevices.set(imageKey, pending);
        pending.then(
          (name) => {
            if (name === undefined || name === '') this.rootDevices.delete(imageKey);
          },
          () => this.rootDevices.delete(imageKey),
        );
      }
      rootDeviceName = await pending;
    }
    let input: RunInstancesCommandInput;
    try {
      input = runInstancesInput({
        spec,
        machineName: name,
        machineUID: req.machine.metadata.uid ?? name,
        userData,
        rootDeviceName,
        placementAnnotation:
          req.machine.spec?.nodeTemplate?.metadata?.annotations?.[AWS_PLACEMENT_ANNOTATION],
      });
    } catch (err) {
      throw new MachineError(
        'InvalidArgument',
        `machine ${name} (image ${spec.ami}): ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    const started = await this.launch(p, spec, name, input, signal);
    this.log.verbose('started EC2 instance', { machine: name, instance: started.InstanceId });
    const instance = await this.visible(p, spec, name, started.InstanceId ?? '', signal);
    if (instance === undefined) {
      this.log.warn(
        'a started EC2 instance is not visible to DescribeInstances yet; answering with it anyway',
        {
          machine: name,
          instance: started.InstanceId,
          waitedMs: VISIBILITY_WAIT_MS,
        },
      );
      return this.response(spec.region, started);
    }
    this.rememberSeen(req.machine.metadata.uid, instance);
    return this.response(spec.region, instance);
  }

  /**
   * Waits for a started instance to show in DescribeInstances, as gardener's provider does: a
   * call right after RunInstances may not find it yet. It is looked for by the machine's Name tag
   * (the coalesced lookups by name), not by id: that is how a retry or another leader finds the
   * machine's instance before it launches one, so the instance is known to be findable that way,
   * and these lookups share their calls with those of the machines about to launch. When the tags
   * do not find it, its id is asked too (an instance already gone is not listed by the tags).
   * Undefined when it did not show within VISIBILITY_WAIT_MS.
   */
  private async visible(
    p: Prepared,
    spec: AwsProviderSpec,
    machineName: string,
    instanceId: string,
    signal?: AbortSignal,
  ): Promise<Instance | undefined> {
    // The time the lookups take counts too (each may wait up to LOOKUP_GATHER_MS for company).
    const started = this.clock.monotonic();
    for (let attempt = 0; attempt < VISIBILITY_MAX_LOOKUPS; attempt++) {
      const i =
        (await this.byName(p, spec, machineName, signal)).find((found) => found.InstanceId === instanceId) ??
        // Not (yet) found by its tags: by id, in any state (one that is gone already is shown too).
        (await this.call(p, 'DescribeInstances', () => p.lookup.byId(instanceId, signal)));
      if (i !== undefined) return i;
      const pause = Math.min(this.visibilityBackoffMs * 2 ** attempt, VISIBILITY_MAX_PAUSE_MS);
      if (this.clock.monotonic() - started + pause >= VISIBILITY_WAIT_MS) break;
      await sleep(pause, signal);
    }
    return undefined;
  }

  /** The root device name of an image (DescribeImages). */
  private async rootDeviceOf(p: Prepared, ami: string, signal?: AbortSignal): Promise<string | undefined> {
    const images = await this.call(p, 'DescribeImages', () =>
      p.api.describeImages({ ImageIds: [ami] }, signal),
    );
    const image = images.Images?.[0];
    if (image === undefined) {
      throw new MachineError('InvalidArgument', `AWS DescribeImages: image ${ami} not found`);
    }
    return image.RootDeviceName;
  }

  /**
   * RunInstances, retried here rather than by the SDK: after an attempt whose answer never came
   * (a timeout, a reset connection) the instance it may have started is looked for by its tags
   * before trying again, and the ClientToken makes EC2 itself refuse a second one.
   */
  private async launch(
    p: Prepared,
    spec: AwsProviderSpec,
    name: string,
    first: RunInstancesCommandInput,
    signal?: AbortSignal,
  ): Promise<Instance> {
    let input = first;
    let lastError: unknown;
    for (let attempt = 0; attempt < LAUNCH_ATTEMPTS; attempt++) {
      if (attempt > 0) await sleep(this.backoffMs * 2 ** (attempt - 1) * (0.8 + 0.4 * Math.random()), signal);
      let instance: Instance | undefined;
      try {
        await p.pacer.turn(signal);
      } catch (err) {
        throw toMachineError(err, 'RunInstances', p.secrets);
      }
      try {
        instance = (await p.api.runInstances(input, signal)).Instances?.[0];
        p.pacer.succeeded();
      } catch (err) {
        if (THROTTLING_ERROR_CODES.has(awsErrorInfo(err).code)) p.pacer.throttled();
        const failure = launchFailure(err);
        if (failure === 'fail') {
          const code = awsErrorInfo(err).code;
          if (OFFERING_CAPACITY_CODES.has(code)) {
            this.offerings?.mark(
              offeringOfSpec(spec),
              UnavailableCause.CapacityError,
              `EC2 answered ${code}`,
            );
          }
          throw toMachineError(err, 'RunInstances', p.secrets);
        }
        lastError = err;
        if (failure === 'unknown') {
          const started = (await this.byName(p, spec, name, signal))[0];
          if (started !== undefined) return started;
        }
        continue;
      }
      if (instance?.InstanceId === undefined) {
        throw new MachineError('Internal', `AWS RunInstances for machine ${name} returned no instance`);
      }
      if (!isGone(instance)) return instance;
      // EC2 answers a known ClientToken with the instance it started for it, even once that is
      // terminated (someone removed it): a token of its own then starts a new one.
      input = {
        ...input,
        ClientToken: createHash('sha256')
          .update(input.ClientToken ?? '')
          .update(instance.InstanceId)
          .digest('hex'),
      };
    }
    throw toMachineError(lastError, 'RunInstances', p.secrets);
  }

  async getMachineStatus(
    req: GetMachineStatusRequest,
    signal?: AbortSignal,
  ): Promise<GetMachineStatusResponse> {
    const spec = this.spec(req);
    const region = this.regionOf(req, spec);
    const p = this.client(region, req.secret, req.machineClass.metadata.name ?? '');
    const i = await this.instanceOf(p, spec, req, signal);
    if (i === undefined) {
      if (parseProviderID(req.machine.spec?.providerID ?? '') === undefined)
        this.rememberAbsent(req.machine.metadata.uid);
      throw this.notFound(req);
    }
    const response = this.response(region, i);
    const pending = uninitialized(spec, i);
    if (pending !== undefined) {
      // The VM goes with the error: the machine may not record it yet (see MachineError.vm).
      throw new MachineError('Uninitialized', `instance ${i.InstanceId ?? ''} ${pending}`, { vm: response });
    }
    return response;
  }

  async initializeMachine(
    req: InitializeMachineRequest,
    signal?: AbortSignal,
  ): Promise<InitializeMachineResponse> {
    const spec = this.spec(req);
    const region = this.regionOf(req, spec);
    const p = this.client(region, req.secret, req.machineClass.metadata.name ?? '');
    const id = parseProviderID(req.machine.spec?.providerID ?? '');
    const i =
      (id === undefined ? undefined : this.freshlySeen(req.machine.metadata.uid, id.instanceId)) ??
      (await this.instanceOf(p, spec, req, signal));
    if (i?.InstanceId === undefined) {
      // Just started and not visible yet (EC2 is eventually consistent), or gone: either way it is
      // not initialised, and the machine controller retries (gardener answers the same).
      throw new MachineError(
        'Uninitialized',
        `no EC2 instance of machine ${req.machine.metadata.name ?? ''} is visible to DescribeInstances yet`,
      );
    }
    const instanceId = i.InstanceId;
    const failures: string[] = [];
    const attempt = async (what: string, write: () => Promise<void>): Promise<void> => {
      try {
        await write();
      } catch (err) {
        if (err instanceof FencedError) throw toMachineError(err, what, p.secrets);
        failures.push(toMachineError(err, what, p.secrets).detail);
      }
    };
    if (spec.srcAndDstChecksEnabled === false) {
      const interfaces = checkableInterfaces(i);
      if (interfaces === undefined) {
        // No interface list in the answer: the instance-level attribute (one interface).
        if (i.SourceDestCheck !== false) {
          await attempt('ModifyInstanceAttribute', () =>
            p.api.modifyInstanceAttribute(
              { InstanceId: instanceId, SourceDestCheck: { Value: false } },
              signal,
            ),
          );
        }
      } else {
        // Per interface: EC2 refuses the instance-level attribute on an instance with several.
        for (const ni of interfaces) {
          if (ni.SourceDestCheck === false || ni.NetworkInterfaceId === undefined) continue;
          const eni = ni.NetworkInterfaceId;
          await attempt('ModifyNetworkInterfaceAttribute', () =>
            p.api.modifyNetworkInterfaceAttribute(
              { NetworkInterfaceId: eni, SourceDestCheck: { Value: false } },
              signal,
            ),
          );
        }
      }
    }
    for (const { ni, missing } of missingIpv6Prefixes(spec, i)) {
      const eni = ni.NetworkInterfaceId ?? '';
      await attempt('AssignIpv6Addresses', () =>
        p.api.assignIpv6Addresses({ NetworkInterfaceId: eni, Ipv6PrefixCount: missing }, signal),
      );
    }
    if (failures.length > 0) {
      throw new MachineError(
        'Uninitialized',
        `initialising instance ${instanceId} failed: ${failures.join('; ')}`,
      );
    }
    return this.response(region, i);
  }

  async deleteMachine(req: DeleteMachineRequest, signal?: AbortSignal): Promise<DeleteMachineResponse> {
    // An invalid class must not keep an instance alive: the providerID names region and id.
    const parsed = parseAwsProviderSpec(req.machineClass.providerSpec);
    const spec = parsed.ok ? parsed.spec : undefined;
    const region = this.regionOf(req, spec);
    const id = parseProviderID(req.machine.spec?.providerID ?? '');
    if (region === '' || (id === undefined && spec === undefined)) {
      if (id === undefined) throw this.notFound(req);
      throw new MachineError(
        'InvalidArgument',
        `cannot tell the region of instance ${id.instanceId}: the providerID names none and the class is invalid`,
      );
    }
    const p = this.client(region, req.secret, req.machineClass.metadata.name ?? '');
    const ids =
      id !== undefined
        ? [id.instanceId]
        : spec === undefined
          ? []
          : (await this.byName(p, spec, req.machine.metadata.name ?? '', signal)).map(
              (i) => i.InstanceId ?? '',
            );
    if (ids.length === 0) throw this.notFound(req);
    try {
      const out = await p.api.terminateInstances({ InstanceIds: ids }, signal);
      const states = (out.TerminatingInstances ?? []).map((t) => t.PreviousState?.Name ?? '');
      if (states.length > 0 && states.every((s) => GONE_STATES.has(s))) throw this.notFound(req);
    } catch (err) {
      if (err instanceof MachineError) throw err;
      if (err instanceof FencedError) throw toMachineError(err, 'TerminateInstances', p.secrets);
      if (INSTANCE_NOT_FOUND_CODES.has(awsErrorInfo(err).code)) throw this.notFound(req);
      // Terminating an instance that is already gone may fail on one of its parts (seen with a
      // network interface deleted with it): an instance that is gone is what was asked for.
      const remaining = await Promise.all(ids.map((i) => this.byId(p, i, signal)));
      if (remaining.every((i) => i === undefined)) throw this.notFound(req);
      throw toMachineError(err, 'TerminateInstances', p.secrets);
    }
    this.log.verbose('terminated EC2 instance', { machine: req.machine.metadata.name, instances: ids });
    return {};
  }

  async listMachines(req: ListMachinesRequest, signal?: AbortSignal): Promise<ListMachinesResponse> {
    const spec = this.spec(req);
    const p = this.client(spec.region, req.secret, req.machineClass.metadata.name ?? '');
    const instances = await this.call(p, 'DescribeInstances', () =>
      describeAll(
        p.api,
        {
          Filters: [
            { Name: 'tag-key', Values: [spec.clusterTag] },
            { Name: 'tag-key', Values: [spec.roleTag] },
            { Name: 'instance-state-name', Values: LIVE_STATES },
          ],
        },
        signal,
      ),
    );
    const machineList: Record<string, string> = {};
    for (const i of instances) {
      const name = tagValue(i, NAME_TAG);
      // Every instance this provider starts has a Name; one without it is not a machine's.
      if (i.InstanceId === undefined || name === undefined || name === '' || isGone(i)) continue;
      machineList[providerIDOf(spec.region, i.InstanceId)] = name;
    }
    return { machineList };
  }

  getVolumeIDs(req: GetVolumeIDsRequest): Promise<GetVolumeIDsResponse> {
    const volumeIDs: string[] = [];
    for (const pv of req.pvSpecs) {
      const ebs = pv.awsElasticBlockStore;
      if (typeof ebs === 'object' && ebs !== null && 'volumeID' in ebs && typeof ebs.volumeID === 'string') {
        // In-tree volume ids are `vol-…` or `aws://<zone>/vol-…`.
        const id = ebs.volumeID.slice(ebs.volumeID.lastIndexOf('/') + 1);
        if (id.startsWith('vol-')) volumeIDs.push(id);
      } else if (pv.csi?.driver === EBS_CSI_DRIVER && pv.csi.volumeHandle !== '') {
        volumeIDs.push(pv.csi.volumeHandle);
      }
    }
    return Promise.resolve({ volumeIDs });
  }
}
