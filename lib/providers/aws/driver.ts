// The AWS EC2 driver: gardener's AWS provider behaviour on @aws-sdk/client-ec2, where it is sound.
// An instance belongs to a machine through its `Name` tag (plus the class's cluster tag); the
// providerID `aws:///<region>/<instance-id>` names it once known, and lookups then go by id.

import { createHash } from 'node:crypto';

import type { Filter, Instance, RunInstancesCommandInput } from '@aws-sdk/client-ec2';

import type { NodeAddress } from '../../api/types.js';
import { MachineError } from '../../driver/codes.js';
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
import { awsErrorInfo, INSTANCE_NOT_FOUND_CODES, launchFailure, toMachineError } from './errors.js';
import { NAME_TAG, needsRootDeviceName, runInstancesInput } from './launch.js';
import { InstanceLookup } from './lookup.js';
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
  /** Wall clock in ms (tests pass a fake). */
  now?: () => number;
}

export class AwsDriver implements Driver {
  private readonly clients = new Map<string, { api: Ec2Api; lookup: InstanceLookup }>();
  private readonly ec2: Ec2ApiFactory;
  private readonly log: Logger;
  private readonly backoffMs: number;
  private readonly now: () => number;
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
    this.now = opts.now ?? Date.now;
  }

  private rememberAbsent(uid: string | undefined): void {
    if (uid === undefined || uid === '') return;
    const now = this.now();
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
    return at !== undefined && this.now() - at <= FRESH_ABSENCE_MS;
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
    let c = this.clients.get(key);
    if (c === undefined) {
      const api = this.ec2(region, creds.credentials);
      c = { api, lookup: new InstanceLookup((Filters, signal) => describeAll(api, { Filters }, signal)) };
      this.clients.set(key, c);
    }
    return { api: c.api, lookup: c.lookup, region, secrets: secretValues(secret) };
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
      p.lookup.byName(NAME_TAG, machineName, spec.clusterTag, LIVE_STATES, signal),
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

  private response(region: string, i: Instance): GetMachineStatusResponse {
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
    const name = req.machine.metadata.name ?? '';
    // A retry after a lost answer or a crash finds the instance the first attempt started.
    const existing = this.freshlyAbsent(req.machine.metadata.uid)
      ? []
      : await this.byName(p, spec, name, signal);
    const first = existing[0];
    if (first !== undefined) {
      if (existing.length > 1) {
        this.log.warn(
          'machine has more than one instance; keeping the oldest (orphan collection removes the others)',
          {
            machine: name,
            instances: existing.map((i) => i.InstanceId ?? ''),
          },
        );
      }
      return this.response(spec.region, first);
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
      });
    } catch (err) {
      throw new MachineError(
        'InvalidArgument',
        `image ${spec.ami}: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    const instance = await this.launch(p, spec, name, input, signal);
    this.log.verbose('started EC2 instance', { machine: name, instance: instance.InstanceId });
    return this.response(spec.region, instance);
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
        instance = (await p.api.runInstances(input, signal)).Instances?.[0];
      } catch (err) {
        const failure = launchFailure(err);
        if (failure === 'fail') throw toMachineError(err, 'RunInstances', p.secrets);
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
    if (spec.srcAndDstChecksEnabled === false && i.SourceDestCheck === true) {
      throw new MachineError(
        'Uninitialized',
        `instance ${i.InstanceId ?? ''} still has its source/destination check enabled`,
      );
    }
    return this.response(region, i);
  }

  async initializeMachine(
    req: InitializeMachineRequest,
    signal?: AbortSignal,
  ): Promise<InitializeMachineResponse> {
    const spec = this.spec(req);
    const region = this.regionOf(req, spec);
    const p = this.client(region, req.secret, req.machineClass.metadata.name ?? '');
    const i = await this.instanceOf(p, spec, req, signal);
    if (i?.InstanceId === undefined) throw this.notFound(req);
    if (spec.srcAndDstChecksEnabled === false && i.SourceDestCheck !== false) {
      const instanceId = i.InstanceId;
      try {
        await p.api.modifyInstanceAttribute(
          { InstanceId: instanceId, SourceDestCheck: { Value: false } },
          signal,
        );
      } catch (err) {
        const e = toMachineError(err, 'ModifyInstanceAttribute', p.secrets);
        throw new MachineError('Uninitialized', `disabling the source/destination check failed: ${e.detail}`);
      }
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
