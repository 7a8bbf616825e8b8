// The creation flow of a machine (MCM's triggerCreationFlow): find or create its VM through the
// driver, record the VM's identity on the machine, initialise it, and move it to Pending (or to
// Available without a target cluster). Every step can be repeated: the driver's
// GetMachineStatus/CreateMachine are idempotent per machine, and identity writes are patches.

import {
  Annotation,
  DEFAULT_MACHINE_PRIORITY,
  Label,
  MachineOperationType,
  MachinePhase,
  MachineState,
  OperationDescriptionMarker,
} from '../../api/constants.js';
import type { Machine, NodeAddress } from '../../api/types.js';
import {
  MachineError,
  decodeMachineError,
  formatMachineError,
  type DecodedMachineError,
} from '../../driver/codes.js';
import type { Driver, MachineRequest } from '../../driver/driver.js';
import { RetryPeriod, createRetryClass, retryDelay } from '../../driver/retry.js';
import type { ReconcileResult } from '../../kube/controller.js';
import type { DeepReadonly } from '../../kube/informer.js';
import type { Secret } from '../../kube/types.js';
import type { Logger } from '../../observability/logger.js';
import { rfc3339 } from '../conditions.js';
import { phaseOf, sameVM } from '../machines.js';
import { ensureBootstrapToken, needsBootstrapToken, substituteUserData } from './bootstrap.js';
import { MachineEventReason, type MachineDeps } from './deps.js';
import { lastOp } from './health.js';
import { launchKeyOf, type LaunchHold } from './launches.js';
import { ResolveProblem, resolveMachineClass } from './resolve.js';
import { creationTimeoutOf } from './settings.js';
import { isNoop, patchMachine, patchMachineStatus, type StatusChange } from './status.js';

type AnyMachine = Machine | DeepReadonly<Machine>;

/** Sorted, de-duplicated addresses with a Hostname entry, as MCM stores them without a target. */
export function normalizeAddresses(addresses: readonly NodeAddress[], nodeName: string): NodeAddress[] {
  const all = [...addresses];
  if (nodeName !== '' && !all.some((a) => a.type === 'Hostname'))
    all.push({ type: 'Hostname', address: nodeName });
  const seen = new Set<string>();
  return all
    .filter((a) => {
      const k = `${a.type}/${a.address}`;
      if (seen.has(k)) return false;
      seen.add(k);
      return true;
    })
    .sort((a, b) => a.type.localeCompare(b.type) || a.address.localeCompare(b.address));
}

function createdAt(m: AnyMachine, now: number): number {
  const t = Date.parse(m.metadata.creationTimestamp ?? '');
  return Number.isNaN(t) ? now : t;
}

async function writeStatus(
  d: MachineDeps,
  m: AnyMachine,
  change: StatusChange,
): Promise<Machine | undefined> {
  if (isNoop(m, change)) return undefined;
  return patchMachineStatus(d.client, m, change, d.clock.now());
}

/**
 * A failed create-path call: CrashLoopBackOff while the creation timeout runs, Failed after it;
 * lastOperation Create/Failed with the driver's code; retried per the code's class (or sooner,
 * when the driver says when a retry can succeed).
 */
async function createFailed(
  d: MachineDeps,
  m: AnyMachine,
  e: DecodedMachineError,
  opts: { initialize?: boolean } = {},
): Promise<ReconcileResult> {
  const now = d.clock.now();
  const timedOut = now - createdAt(m, now) > creationTimeoutOf(m, d.settings);
  const phase = timedOut ? MachinePhase.Failed : MachinePhase.CrashLoopBackOff;
  const formatted = formatMachineError(e.code, e.message);
  const description =
    opts.initialize === true
      ? `Provider error: ${formatted}. ${OperationDescriptionMarker.InstanceInitialization}`
      : `Cloud provider message - ${formatted}`;
  const wrote = await writeStatus(d, m, {
    phase,
    lastOperation: lastOp(MachineOperationType.Create, MachineState.Failed, description, now, e.code),
  });
  if (wrote !== undefined) {
    d.recorder.event(
      m,
      'Warning',
      opts.initialize === true ? MachineEventReason.InitializeFailed : MachineEventReason.CreateFailed,
      `${description}${timedOut ? ' (creation timeout passed: machine Failed)' : ''}`,
    );
  }
  if (timedOut) return {};
  const period =
    opts.initialize === true
      ? RetryPeriod.Short
      : retryDelay(createRetryClass(e.code), d.settings.resourceExhaustedRetryMs);
  // A driver that knows when the call can succeed (an offering refused until its mark ends) is
  // retried then rather than after the code's whole period.
  const retry = e.retryAfterMs === undefined ? period : Math.max(0, Math.min(period, e.retryAfterMs));
  return { requeueAfter: retry };
}

/**
 * The merged class secret with the user data placeholders filled in. User data is handled as
 * bytes (see substituteUserData): without placeholders the Secret's value goes to the driver as is.
 */
async function machineSecret(d: MachineDeps, m: AnyMachine, secret: Secret): Promise<Secret> {
  const raw = secret.data?.userData;
  if (raw === undefined) return secret;
  const userData = Buffer.from(raw, 'base64');
  let token: string | undefined;
  const name = m.metadata.name ?? '';
  if (d.target !== undefined && needsBootstrapToken(userData)) {
    const expires = d.clock.now() + creationTimeoutOf(m, d.settings);
    const t = await ensureBootstrapToken(
      d.target,
      { name, uid: m.metadata.uid ?? '' },
      expires,
      d.settings.bootstrapTokenAuthExtraGroups,
    );
    token = t.token;
    d.tokens.set(m.metadata.uid, t.secret);
  }
  const filled = substituteUserData(userData, name, token);
  if (filled === userData) return secret;
  return { ...secret, data: { ...(secret.data ?? {}), userData: filled.toString('base64') } };
}

/** Creates, adopts or initialises the VM of a machine that has none (or is in CrashLoopBackOff). */
export async function runCreationFlow(
  d: MachineDeps,
  cached: AnyMachine,
  log: Logger,
): Promise<ReconcileResult> {
  const resolved = resolveMachineClass(
    { machineClasses: d.informers.machineClasses, secrets: d.informers.secrets, providers: d.providers },
    cached,
  );
  if (!resolved.ok) {
    if (resolved.problem === ResolveProblem.ClassNotFinalized) {
      log.verbose(resolved.message);
      return { requeueAfter: RetryPeriod.Short };
    }
    // A configuration problem: replacing the machine would not help, so its phase stays; it is
    // retried when the class or secret changes, and periodically.
    const now = d.clock.now();
    const wrote = await writeStatus(d, cached, {
      lastOperation: lastOp(MachineOperationType.Create, MachineState.Failed, resolved.message, now),
    });
    if (wrote !== undefined) d.recorder.event(cached, 'Warning', resolved.problem, resolved.message);
    log.info('machine cannot be created yet', { reason: resolved.problem, message: resolved.message });
    return { requeueAfter: RetryPeriod.Medium };
  }
  const { driver, machineClass } = resolved;
  let m: AnyMachine = cached;
  const name = m.metadata.name ?? '';
  const withTarget = d.target !== undefined;
  const secret = await machineSecret(d, m, resolved.secret);
  const request = (machine: AnyMachine): MachineRequest => ({
    machine: structuredClone(machine) as Machine,
    machineClass: structuredClone(machineClass) as MachineRequest['machineClass'],
    secret,
  });

  let providerID = m.spec?.providerID ?? '';
  let nodeName = m.metadata.labels?.[Label.Node] ?? '';
  let addresses: NodeAddress[] = [];
  let needsInit = false;
  let create = false;
  try {
    const s = await driver.getMachineStatus(request(m));
    providerID = s.providerID;
    nodeName = s.nodeName;
    addresses = s.addresses ?? [];
  } catch (err) {
    const e = decodeMachineError(err);
    if (!e.ok) {
      log.warn('GetMachineStatus failed with an error that is not a machine error', { err });
      return { requeueAfter: RetryPeriod.Medium };
    }
    if (e.code === 'NotFound' || e.code === 'Unimplemented') {
      create = providerID === '';
      // A VM recorded on a machine whose creation has not completed (this flow runs for it) and
      // that its cloud does not show yet: a cloud that is only eventually consistent (EC2) does
      // not list a new instance at once. Its initialisation is not skipped: it is done (or
      // retried) now, and the VM's absence, if real, fails the machine by the creation timeout.
      if (!create && e.code === 'NotFound') needsInit = true;
    } else if (e.code === 'Uninitialized') {
      needsInit = true;
      // The driver names the VM it found (the machine may not record it yet: its identity patch
      // after CreateMachine may have failed).
      const vm = err instanceof MachineError ? err.vm : undefined;
      if (vm !== undefined && vm.providerID !== '') {
        providerID = vm.providerID;
        if (vm.nodeName !== '') nodeName = vm.nodeName;
        addresses = vm.addresses ?? addresses;
      }
    } else return createFailed(d, m, e);
  }

  if (create) {
    const hold = d.launches.holdOf(launchKeyOf(m), d.clock.now());
    if (hold !== undefined) return launchHeld(d, m, hold, log);
    const started = d.clock.now();
    try {
      const r = await driver.createMachine(request(m));
      providerID = r.providerID;
      nodeName = r.nodeName;
      addresses = r.addresses ?? [];
    } catch (err) {
      return createFailed(d, m, decodeMachineError(err));
    }
    d.metrics.observe('create', m, (d.clock.now() - started) / 1000);
    log.info('created VM', { providerID, node: nodeName });
    needsInit = true;
    // A VM that reuses an existing Node of another name would take over that node's identity. A
    // Node that already names this VM is its own: a cloud whose instances boot fast (or an
    // emulator) may register it before CreateMachine's answer is handled.
    const existing =
      withTarget && nodeName !== name ? d.informers.nodes?.get(undefined, nodeName) : undefined;
    if (existing !== undefined && !sameVM(existing.spec?.providerID ?? '', providerID)) {
      return staleNode(d, m, driver, request, providerID, nodeName, log);
    }
  }

  if (providerID === '' || (withTarget && nodeName === '')) {
    return createFailed(d, m, {
      code: 'Internal',
      message: `the driver returned no ${providerID === '' ? 'providerID' : 'node name'} for the VM`,
      ok: true,
    });
  }

  // Identity first, so that a crash from here on finds the VM again through the machine.
  const labels: Record<string, string> = {};
  if (withTarget && m.metadata.labels?.[Label.Node] !== nodeName) labels[Label.Node] = nodeName;
  const annotations: Record<string, string> = {};
  if (m.metadata.annotations?.[Annotation.MachinePriority] === undefined)
    annotations[Annotation.MachinePriority] = String(DEFAULT_MACHINE_PRIORITY);
  const spec = m.spec?.providerID === providerID ? undefined : { providerID };
  if (Object.keys(labels).length > 0 || Object.keys(annotations).length > 0 || spec !== undefined) {
    m = await patchMachine(d.client, m, {
      ...(Object.keys(labels).length > 0 ? { labels } : {}),
      ...(Object.keys(annotations).length > 0 ? { annotations } : {}),
      ...(spec === undefined ? {} : { spec }),
    });
  }

  if (needsInit) {
    const started = d.clock.now();
    try {
      const r = await driver.initializeMachine(request(m));
      addresses = r.addresses ?? addresses;
      d.metrics.observe('initialize', m, (d.clock.now() - started) / 1000);
    } catch (err) {
      const e = decodeMachineError(err);
      if (!(e.ok && e.code === 'Unimplemented')) return createFailed(d, m, e, { initialize: true });
    }
  }

  const now = d.clock.now();
  if (withTarget) {
    await writeStatus(d, m, {
      phase: MachinePhase.Pending,
      timeoutActive: true,
      lastOperation: lastOp(
        MachineOperationType.Create,
        MachineState.Processing,
        'Creating machine on cloud provider',
        now,
      ),
    });
    const deadline = createdAt(m, now) + creationTimeoutOf(m, d.settings);
    return { requeueAfter: Math.max(1000, deadline - now) };
  }
  await writeStatus(d, m, {
    phase: MachinePhase.Available,
    timeoutActive: false,
    addresses: normalizeAddresses(addresses, nodeName),
    lastOperation: lastOp(
      MachineOperationType.Create,
      MachineState.Successful,
      `Machine ${name} created on the cloud provider (no target cluster: it stays Available)`,
      now,
    ),
  });
  return {};
}

/**
 * The machine's class's launches back off after failing (launches.ts): no launch now. The machine
 * reads CrashLoopBackOff with a Create operation failed with FailedPrecondition (the autoscaler
 * takes it for a failed scale-up), and is looked at again when the hold ends; Failed once its
 * creation timeout passes, as for any creation that keeps failing.
 */
async function launchHeld(
  d: MachineDeps,
  m: AnyMachine,
  hold: LaunchHold,
  log: Logger,
): Promise<ReconcileResult> {
  const now = d.clock.now();
  const timedOut = now - createdAt(m, now) > creationTimeoutOf(m, d.settings);
  const cls = m.spec?.class?.name ?? '';
  const description = `Launches of machine class ${cls} back off: ${hold.failures} failed in a row (the last: ${hold.lastFailure}); the next launch is tried at ${rfc3339(hold.until)}`;
  const wrote = await writeStatus(d, m, {
    phase: timedOut ? MachinePhase.Failed : MachinePhase.CrashLoopBackOff,
    lastOperation: lastOp(
      MachineOperationType.Create,
      MachineState.Failed,
      description,
      now,
      'FailedPrecondition',
    ),
  });
  if (wrote !== undefined) {
    d.recorder.event(m, 'Warning', MachineEventReason.LaunchBackoff, description);
    log.info('launch held: the launches of its class back off', {
      class: cls,
      failures: hold.failures,
      until: rfc3339(hold.until),
    });
  }
  return timedOut ? {} : { requeueAfter: Math.max(1000, hold.until - now) };
}

/** The VM came up with the name of an existing Node: delete that VM and fail the machine. */
async function staleNode(
  d: MachineDeps,
  m: AnyMachine,
  driver: Driver,
  request: (machine: AnyMachine) => MachineRequest,
  providerID: string,
  nodeName: string,
  log: Logger,
): Promise<ReconcileResult> {
  const synthetic = structuredClone(m) as Machine;
  synthetic.spec = { ...(synthetic.spec ?? {}), providerID };
  try {
    await driver.deleteMachine(request(synthetic));
  } catch (err) {
    const e = decodeMachineError(err);
    if (e.code !== 'NotFound') {
      log.warn('could not delete the VM that reused an old node', { err, providerID });
      return { requeueAfter: RetryPeriod.Short };
    }
  }
  const now = d.clock.now();
  const message = `VM ${providerID} came up as node ${nodeName}, which already exists for another machine (VM using old node obj); the VM was deleted`;
  await writeStatus(d, m, {
    phase: MachinePhase.Failed,
    lastOperation: lastOp(MachineOperationType.Create, MachineState.Failed, message, now),
  });
  d.recorder.event(m, 'Warning', MachineEventReason.StaleNode, message);
  return {};
}

/** Whether the creation flow applies: no VM identity yet, or creation is being retried. */
export function needsCreation(m: AnyMachine): boolean {
  const p = phaseOf(m);
  return (
    (m.spec?.providerID ?? '') === '' || p === MachinePhase.Creating || p === MachinePhase.CrashLoopBackOff
  );
}
