// The cluster-autoscaler externalgrpc CloudProvider server. It reads the manager's shared caches
// and writes through the manager's client, so the autoscaler and the controllers never disagree
// about what exists. Node groups are MachineDeployments (groups.ts); scaling writes only the
// deployment (replicas, and the trigger-deletion annotation naming the machines to remove), and the
// MachineDeployment, MachineSet and Machine controllers do the rest under their safety limits.

import type { PeerCertificate } from 'node:tls';

import { status } from '@grpc/grpc-js';

import { Annotation } from '../api/constants.js';
import { replicasOf } from '../api/replicas.js';
import { MachineDeploymentResource, type MachineClass, type MachineDeployment } from '../api/types.js';
import type { SharedInformers } from '../controllers/context.js';
import { hasJoined } from '../controllers/machines.js';
import type { NodePriceAnswer, NodePriceRequest } from '../driver/registry.js';
import type { KubeApi } from '../kube/client.js';
import type { EventRecorder } from '../kube/events.js';
import type { Clock } from '../kube/clock.js';
import { FencedError, errorMessage, isConflict, isNotFound } from '../kube/errors.js';
import type { WriteFence } from '../kube/fence.js';
import type { DeepReadonly } from '../kube/informer.js';
import type { Logger } from '../observability/logger.js';
import type { Registry } from '../observability/metrics.js';
import {
  GrpcStatusError,
  deadlineExceeded,
  failedPrecondition,
  invalidArgument,
  notFound,
  unavailable,
  unimplemented,
} from './errors.js';
import type { NodeGroup, NodeGroupFlag } from './groups.js';
import {
  GrpcServer,
  type GrpcFailure,
  type GrpcServerLimits,
  type ServerStreamCall,
  type UnaryCall,
  type UnaryHandler,
} from './grpc.js';
import {
  carriesTemplate,
  instanceOf,
  isRegistered,
  joinedAt,
  justReady,
  machineOfPlaceholder,
} from './instances.js';
import { GroupLookup, type NodeRef } from './lookup.js';
import { RefusalLog, clientIdentity, describeClient, isAllowedClient, type ClientIdentity } from './authz.js';
import { autoscalerMetrics, callRecorder, type AutoscalerMetrics, type CallRecorder } from './metrics.js';
import { decodeDefaults, encodeGetOptionsResponse, type GetOptionsRequest } from './options-wire.js';
import {
  hasOverrides,
  mergeOptions,
  parseOptionAnnotations,
  type OptionOverrides,
  type WireOptions,
} from './options.js';
import { PriceBook } from './prices.js';
import {
  CLOUD_PROVIDER_SERVICE,
  cloudProviderService,
  decodePodRequests,
  encodeNode,
  encodeResponse,
  healthService,
} from './proto.js';
import { planDecrease, planDeleteNodes, planIncrease, type DeletePlan } from './scaling.js';
import { buildTemplateNode } from './template.js';
import { ReloadingServerTls, describeTlsMaterial, secureContextOptions } from './tls.js';
import type { GrpcTransport, GrpcTransportFactory } from './transport.js';
import { rfc3339 } from '../controllers/conditions.js';
import { machinesGoing } from '../controllers/machinedeployment/marks.js';

export interface AutoscalerServerOptions {
  /** HOST:PORT to listen on. */
  address: string;
  /**
   * mTLS material (reloaded when the files change) and the client certificate names allowed to
   * call (empty: any the client CA signed); undefined only with --grpc-insecure.
   */
  tls:
    | { certFile: string; keyFile: string; clientCAFile: string; allowedClientNames: readonly string[] }
    | undefined;
  groups: readonly NodeGroupFlag[];
  gpuLabel: string;
  gpuTypes: readonly string[];
  namespace: string;
  /** Writes scaling changes: a client with a budget of its own, guarded by the fence. */
  client: KubeApi;
  /** Closed unless this replica holds the leader Lease; undefined without leader election. */
  fence?: WriteFence | undefined;
  informers: SharedInformers;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  /** Why the machine API cannot be trusted right now (caches not synced, API frozen), or undefined. */
  unhealthy: () => string | undefined;
  /** A node's price from its class's provider (ProviderRegistry.nodePrice); none: providers price nothing. */
  providerPrice?: ((provider: string, req: NodePriceRequest) => NodePriceAnswer) | undefined;
  /** Events about the deployments and classes whose autoscaler annotations are refused. */
  recorder?: EventRecorder | undefined;
  /** The transport's limits (the --grpc-* limit flags); unset fields take DEFAULT_GRPC_LIMITS. */
  limits?: Partial<GrpcServerLimits> | undefined;
  /** The gRPC transport (default: our own, GrpcServer); the benchmark compares others. */
  transport?: GrpcTransportFactory | undefined;
}

interface WireNode {
  providerID?: string;
  name?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** Answers a call; a GrpcStatusError returned (or thrown, or rejected) is the call's status. */
type Handler = (req: Record<string, unknown>, deadline: number) => unknown;

const str = (v: unknown): string => (typeof v === 'string' ? v : '');
const num = (v: unknown): number => (typeof v === 'number' ? v : Number.NaN);

/** Waits between conflict retries of one scaling write (each re-reads the deployment first). */
const CONFLICT_RETRY_MS = 50;

/** A group's encoded answers, valid while its deployment is this object. */
interface GroupAnswers {
  mcd: DeepReadonly<MachineDeployment> | undefined;
  forNode: Buffer;
  targetSize: Buffer | undefined;
  /** The options its annotations set (undefined: none, the autoscaler's defaults apply). */
  options: OptionOverrides | undefined;
  /** NodeGroupGetOptions answers by the bytes of the defaults they were asked with. */
  optionAnswers: Map<string, Buffer>;
}

/** NodeGroupGetOptions for a group without options: no options, so the autoscaler uses its flags. */
const NO_OPTIONS = encodeGetOptionsResponse(undefined);

/** Distinct defaults remembered per group (the autoscaler sends one set; a restart may change it). */
const MAX_OPTION_ANSWERS = 4;

interface WireTime {
  seconds?: number | null;
  nanos?: number | null;
}

/** A Timestamp (1.35+) or metav1.Time (<= 1.34) in epoch milliseconds; NaN when absent. */
function timeOf(ts: unknown, legacy: unknown): number {
  const t = (ts ?? legacy) as WireTime | null | undefined;
  if (t === null || t === undefined) return Number.NaN;
  return (t.seconds ?? 0) * 1000 + (t.nanos ?? 0) / 1e6;
}

let notAutoscaledAnswer: Buffer | undefined;

/** NodeGroupForNode's answer for a node of no served group (id ""). */
function notAutoscaled(): Buffer {
  notAutoscaledAnswer ??= encodeResponse('NodeGroupForNode', { nodeGroup: { id: '' } });
  return notAutoscaledAnswer;
}

export class AutoscalerServer {
  // Our own gRPC transport (grpc.ts): it carries the limits against a misbehaving client that
  // grpc-js's server has no hook for (docs/performance.md, "Transport choice"), and a loop of the
  // autoscaler's ~17,000 calls took 1.09x as long on grpc-js.
  private readonly server: GrpcTransport;
  private readonly lookup: GroupLookup;
  private readonly metrics: AutoscalerMetrics;
  private readonly log: Logger;
  private readonly locks = new Map<string, Promise<void>>();
  private readonly answers = new WeakMap<NodeGroup, GroupAnswers>();
  private readonly templates = new WeakMap<
    DeepReadonly<MachineDeployment>,
    { cls: DeepReadonly<MachineClass> | undefined; groupId: string; answer: Buffer | GrpcStatusError }
  >();
  private readonly healthWatchers = new Set<ServerStreamCall>();
  private readonly allowedClients: ReadonlySet<string>;
  private readonly identities = new WeakMap<PeerCertificate, ClientIdentity>();
  private readonly optionProblems = new Set<string>();
  private readonly refusals: RefusalLog;
  private readonly prices: PriceBook;
  private tls: ReloadingServerTls | undefined;
  private serving = false;
  port = 0;

  constructor(private readonly opts: AutoscalerServerOptions) {
    this.log = opts.logger.child({ component: 'autoscaler-grpc' });
    this.lookup = new GroupLookup(opts.informers, opts.namespace, opts.groups, opts.clock, this.log);
    this.metrics = autoscalerMetrics(opts.registry);
    this.allowedClients = new Set(opts.tls?.allowedClientNames ?? []);
    this.refusals = new RefusalLog(opts.clock, this.log);
    this.server = (opts.transport ?? ((limits, authorize) => new GrpcServer(limits, authorize)))(
      opts.limits,
      this.allowedClients.size === 0 ? undefined : (path, peer) => this.authorize(path, peer),
    );
    this.prices = new PriceBook({
      lookup: this.lookup,
      informers: opts.informers,
      providerPrice:
        opts.providerPrice ?? ((provider) => ({ unknown: `provider ${provider} has no prices` })),
      recorder: opts.recorder,
      logger: this.log,
      registry: opts.registry,
    });
    const handlers: Record<string, Handler> = {
      NodeGroups: () => this.nodeGroups(),
      NodeGroupForNode: (req) => this.nodeGroupForNode(req.node as WireNode | undefined),
      PricingNodePrice: (req) => this.nodePrice(req),
      PricingPodPrice: (req) => this.podPrice(req),
      GPULabel: () => ({ label: opts.gpuLabel }),
      GetAvailableGPUTypes: () => ({
        gpuTypes: Object.fromEntries(opts.gpuTypes.map((t) => [t, { type_url: '', value: Buffer.alloc(0) }])),
      }),
      Cleanup: () => ({}),
      Refresh: () => this.refresh(),
      NodeGroupTargetSize: (req) => this.targetSize(str(req.id)),
      NodeGroupIncreaseSize: (req, deadline) => this.increaseSize(str(req.id), num(req.delta), deadline),
      NodeGroupDeleteNodes: (req, deadline) =>
        this.deleteNodes(str(req.id), (req.nodes as WireNode[] | undefined) ?? [], deadline),
      NodeGroupDecreaseTargetSize: (req, deadline) =>
        this.decreaseTargetSize(str(req.id), num(req.delta), deadline),
      NodeGroupNodes: (req) => this.nodes(str(req.id)),
      NodeGroupTemplateNodeInfo: (req) => this.templateNodeInfo(str(req.id)),
      NodeGroupGetOptions: (req) => this.getOptions(req as unknown as GetOptionsRequest),
    };
    const impl: Record<string, UnaryHandler> = {};
    for (const [method, fn] of Object.entries(handlers)) impl[method] = this.unary(method, fn);
    this.server.addService(cloudProviderService(), impl);
    // Health stays open to every client the handshake accepted (the allowlist guards the
    // CloudProvider service only): it tells no more than SERVING or NOT_SERVING, and probes
    // such as grpc_health_probe need not carry the autoscaler's identity.
    const serviceOf = (call: UnaryCall | ServerStreamCall): string =>
      (call.request as { service?: string } | null)?.service ?? '';
    this.server.addService(healthService(), {
      Check: (call: UnaryCall) => {
        const s = this.healthStatus(serviceOf(call));
        if (s === undefined)
          call.fail({ code: status.NOT_FOUND, details: `unknown service ${serviceOf(call)}` });
        else call.answer({ status: s });
      },
      Watch: (call: ServerStreamCall) => {
        call.write({ status: this.healthStatus(serviceOf(call)) ?? 'SERVICE_UNKNOWN' });
        this.healthWatchers.add(call);
        call.onCancelled(() => this.healthWatchers.delete(call));
      },
    });
  }

  private healthStatus(service: string): string | undefined {
    if (service !== '' && service !== CLOUD_PROVIDER_SERVICE) return undefined;
    return this.serving && this.opts.unhealthy() === undefined ? 'SERVING' : 'NOT_SERVING';
  }

  async start(): Promise<void> {
    if (this.opts.tls !== undefined) {
      this.tls = await ReloadingServerTls.load(this.opts.tls, {
        clock: this.opts.clock,
        logger: this.log,
        metrics: this.metrics,
      });
    }
    this.tls?.onUpdate((material) => {
      this.server.setSecureContext(secureContextOptions(material));
    });
    this.port = await this.server.listen(
      this.opts.address,
      this.tls === undefined ? undefined : secureContextOptions(this.tls.current()),
    );
    this.tls?.start();
    this.serving = true;
    this.notifyHealth();
    this.log.info('externalgrpc server listening', {
      address: this.opts.address,
      port: this.port,
      tls: this.tls === undefined ? 'off (--grpc-insecure)' : 'mutual',
      ...(this.tls === undefined
        ? {}
        : {
            ...describeTlsMaterial(this.tls.current()),
            allowedClientNames:
              this.allowedClients.size === 0
                ? 'any client certificate the client CA signed'
                : [...this.allowedClients],
          }),
      groups: this.lookup.groups().map((g) => `${g.id} (${g.min}:${g.max})`),
    });
  }

  /** Stops taking calls, lets running ones finish (bounded), then closes. */
  async stop(graceMs = 5000): Promise<void> {
    this.serving = false;
    this.tls?.stop();
    this.notifyHealth();
    for (const w of this.healthWatchers) w.end();
    this.healthWatchers.clear();
    await this.server.shutdown(graceMs);
  }

  private notifyHealth(): void {
    for (const w of this.healthWatchers) w.write({ status: this.healthStatus('') });
  }

  /**
   * The allowlist (--grpc-client-allowed-names), asked by the transport when a stream opens, before
   * its body is read: a refused client holds no memory. Health stays open (see the constructor).
   * A certificate's names are read once per connection.
   */
  private authorize(path: string, peer: PeerCertificate | undefined): GrpcFailure | undefined {
    if (!path.startsWith(`/${CLOUD_PROVIDER_SERVICE}/`)) return undefined;
    let id: ClientIdentity | undefined;
    if (peer !== undefined) {
      id = this.identities.get(peer);
      if (id === undefined) {
        id = clientIdentity(peer);
        if (id !== undefined) this.identities.set(peer, id);
      }
    }
    if (isAllowedClient(id, this.allowedClients)) return undefined;
    const method = path.slice(path.lastIndexOf('/') + 1);
    const client = describeClient(id);
    callRecorder(this.metrics, method).record(status[status.PERMISSION_DENIED], 0);
    this.refusals.refused(client, method);
    return {
      code: status.PERMISSION_DENIED,
      details: `the client certificate (${client}) is not allowed to call this server (--grpc-client-allowed-names)`,
    };
  }

  /**
   * Wraps a handler: status mapping, metrics, one debug line per call. A handler that answers
   * synchronously (every read) is answered in the same turn, without promises.
   */
  private unary(method: string, fn: Handler): UnaryHandler {
    const recorder = callRecorder(this.metrics, method);
    return (call) => {
      const started = performance.now();
      let res: unknown;
      try {
        res = fn(call.request as Record<string, unknown>, deadlineOf(call));
      } catch (err) {
        this.failed(method, recorder, started, call, err);
        return;
      }
      if (res instanceof Promise) {
        res.then(
          (r: unknown) => {
            this.answered(method, recorder, started, call, r);
          },
          (err: unknown) => {
            this.failed(method, recorder, started, call, err);
          },
        );
      } else if (res instanceof GrpcStatusError) this.failed(method, recorder, started, call, res);
      else this.answered(method, recorder, started, call, res);
    };
  }

  private answered(
    method: string,
    recorder: CallRecorder,
    started: number,
    call: UnaryCall,
    res: unknown,
  ): void {
    done(recorder, started, 'OK');
    this.log.debug('autoscaler call', { method, request: loggable(call.request) });
    call.answer(res);
  }

  private failed(
    method: string,
    recorder: CallRecorder,
    started: number,
    call: UnaryCall,
    err: unknown,
  ): void {
    const e =
      err instanceof GrpcStatusError
        ? err
        : new GrpcStatusError(status.UNAVAILABLE, `${method}: ${errorMessage(err)}`, { cause: err });
    const code = status[e.code];
    done(recorder, started, code);
    // Unpriced nodes are asked about in every loop that prices: not worth a line each time.
    if (e.code === status.UNIMPLEMENTED || (e.code === status.NOT_FOUND && method.startsWith('Pricing')))
      this.log.debug('autoscaler call', { method, code, message: e.message });
    else
      this.log.info('autoscaler call refused', {
        method,
        code,
        message: e.message,
        request: loggable(call.request),
      });
    call.fail({ code: e.code, details: e.message });
  }

  // ---- reads ----------------------------------------------------------------------------------

  private wireGroup(g: NodeGroup, mcd = this.lookup.deployment(g)): Record<string, unknown> {
    const replicas = mcd === undefined ? 0 : replicasOf(mcd);
    return {
      id: g.id,
      minSize: g.min,
      maxSize: g.max,
      debug: `${g.id} (${g.min}:${g.max}, replicas=${replicas})`,
    };
  }

  private nodeGroups(): unknown {
    const groups = this.lookup.groups();
    this.metrics.groups.set(groups.length);
    return { nodeGroups: groups.map((g) => this.wireGroup(g)) };
  }

  /**
   * The encoded answers of a group that only change with its deployment: built on the first call
   * after the deployment (or the group's limits) changed, then sent as they are. The autoscaler
   * asks NodeGroupForNode for every node in every loop, so this is where its loop spends our time.
   */
  private answersOf(g: NodeGroup): GroupAnswers {
    const mcd = this.lookup.deployment(g);
    let a = this.answers.get(g);
    if (a === undefined || a.mcd !== mcd) {
      a = {
        mcd,
        forNode: encodeResponse('NodeGroupForNode', { nodeGroup: this.wireGroup(g, mcd) }),
        targetSize:
          mcd === undefined
            ? undefined
            : encodeResponse('NodeGroupTargetSize', { targetSize: replicasOf(mcd) }),
        options: this.optionsOf(mcd),
        optionAnswers: new Map(),
      };
      this.answers.set(g, a);
    }
    return a;
  }

  /** Never fails: a node we cannot place is "not autoscaled" (id ""); an error would abort a scale-up. */
  private nodeGroupForNode(node: WireNode | undefined): unknown {
    if (node === undefined) return notAutoscaled();
    try {
      const ref = toRef(node);
      const m = this.lookup.machineForNode(ref);
      // A real node counts as its group's once its machine joined and the node, as the autoscaler
      // sees it, carries the template's labels (see isRegistered), and in a group that answers
      // options once its not-ready taint is gone (justReady); the autoscaler's stand-ins for
      // unregistered instances (placeholder ids) always do.
      const g = m === undefined ? undefined : this.lookup.groupOfMachine(m);
      if (m === undefined || g === undefined) return notAutoscaled();
      const a = this.answersOf(g);
      const own =
        (hasJoined(m) &&
          carriesTemplate(ref.labels, m) &&
          (a.options === undefined ||
            !justReady(this.lookup.nodeOf(m), this.opts.clock.now(), joinedAt(m)))) ||
        machineOfPlaceholder(ref.providerID) !== undefined ||
        machineOfPlaceholder(ref.name) !== undefined;
      return own ? a.forNode : notAutoscaled();
    } catch (err) {
      this.log.error('NodeGroupForNode lookup failed; answering "not autoscaled"', { err, node: node.name });
      return notAutoscaled();
    }
  }

  /** The options a deployment's annotations set; a refused value is reported on the deployment. */
  private optionsOf(mcd: DeepReadonly<MachineDeployment> | undefined): OptionOverrides | undefined {
    if (mcd === undefined) return undefined;
    const { overrides, problems } = parseOptionAnnotations(mcd.metadata.annotations);
    if (problems.length > 0) {
      const message = `autoscaler options ignored: ${problems.join('; ')}`;
      const key = `${mcd.metadata.uid ?? ''}/${message}`;
      if (!this.optionProblems.has(key)) {
        if (this.optionProblems.size > 1000) this.optionProblems.clear();
        this.optionProblems.add(key);
        this.log.warn('node group autoscaling option ignored', {
          group: `${mcd.metadata.namespace ?? ''}/${mcd.metadata.name ?? ''}`,
          problems,
        });
        this.opts.recorder?.event(mcd, 'Warning', 'InvalidAutoscalerOption', message);
      }
    }
    return hasOverrides(overrides) ? overrides : undefined;
  }

  /**
   * The group's options over the autoscaler's defaults, or no options at all for a group without
   * annotations (the autoscaler's flags apply, MaxNodeStartupTime included: the protocol has no
   * field for it, kubernetes/autoscaler#10245). Encoded once per deployment version and defaults.
   */
  private getOptions(req: GetOptionsRequest): unknown {
    const g = this.lookup.groupById(req.id);
    if (g === undefined || this.lookup.deployment(g) === undefined) {
      return notFound(`node group "${req.id}" is not served`);
    }
    const a = this.answersOf(g);
    if (a.options === undefined) return NO_OPTIONS;
    const key = req.defaults.toString('latin1');
    let answer = a.optionAnswers.get(key);
    if (answer === undefined) {
      let defaults: WireOptions;
      try {
        defaults = decodeDefaults(req.defaults);
      } catch (err) {
        return invalidArgument(`NodeGroupGetOptions: the defaults do not decode: ${errorMessage(err)}`);
      }
      answer = encodeGetOptionsResponse(mergeOptions(defaults, a.options));
      if (a.optionAnswers.size >= MAX_OPTION_ANSWERS) a.optionAnswers.clear();
      a.optionAnswers.set(key, answer);
    }
    return answer;
  }

  private nodePrice(req: Record<string, unknown>): unknown {
    const node = req.node as WireNode | null | undefined;
    if (node === null || node === undefined) return invalidArgument('PricingNodePrice: no node');
    const price = this.prices.nodePrice(
      { ...toRef(node), annotations: node.annotations ?? {} },
      timeOf(req.startTimestamp, req.startTime),
      timeOf(req.endTimestamp, req.endTime),
    );
    return price instanceof GrpcStatusError ? price : { price };
  }

  private podPrice(req: Record<string, unknown>): unknown {
    const bytes = [req.pod_bytes, req.pod].find((b): b is Buffer => Buffer.isBuffer(b) && b.length > 0);
    if (bytes === undefined) return invalidArgument('PricingPodPrice: no pod');
    let pod: { cpu: number; memory: number };
    try {
      pod = decodePodRequests(bytes);
    } catch (err) {
      return invalidArgument(`PricingPodPrice: the pod does not decode: ${errorMessage(err)}`);
    }
    const price = this.prices.podPrice(
      pod,
      timeOf(req.startTimestamp, req.startTime),
      timeOf(req.endTimestamp, req.endTime),
    );
    return price instanceof GrpcStatusError ? price : { price };
  }

  private groupOrThrow(id: string): { group: NodeGroup; mcd: DeepReadonly<MachineDeployment> } {
    const group = this.lookup.groupById(id);
    const mcd = group === undefined ? undefined : this.lookup.deployment(group);
    if (group === undefined || mcd === undefined) {
      throw notFound(
        `node group "${id}" is not served (expected NAMESPACE/NAME of a MachineDeployment named by --nodes or annotated with min/max sizes)`,
      );
    }
    return { group, mcd };
  }

  private refresh(): unknown {
    const why = this.opts.unhealthy();
    if (why !== undefined) throw unavailable(`the machine API is not usable: ${why}`);
    return {};
  }

  private targetSize(id: string): unknown {
    const { group, mcd } = this.groupOrThrow(id);
    return this.answersOf(group).targetSize ?? { targetSize: replicasOf(mcd) };
  }

  private nodes(id: string): unknown {
    const { group, mcd } = this.groupOrThrow(id);
    const machines = this.lookup.machines(mcd);
    const going = this.going(mcd, machines);
    const holdAt = this.justReadyHold(group);
    const instances = machines.map((m) =>
      instanceOf(m, this.lookup.nodeOf(m), going.has(m.metadata.name ?? ''), holdAt),
    );
    return { instances };
  }

  /**
   * For a group that answers per-group options, the time at which a just-Ready node still under a
   * not-ready taint is held out of it (see justReady); undefined for the other groups.
   */
  private justReadyHold(g: NodeGroup): number | undefined {
    return this.answersOf(g).options === undefined ? undefined : this.opts.clock.now();
  }

  /** Machines of the deployment whose deletion marks stand (the controller's own plan). */
  private going(mcd: DeepReadonly<MachineDeployment>, machines = this.lookup.machines(mcd)): Set<string> {
    return machinesGoing({ mcd, sets: this.lookup.sets(mcd), machines, now: this.opts.clock.now() });
  }

  /** The template answer (or refusal) is kept while the deployment and class objects stay the same. */
  private templateNodeInfo(id: string): unknown {
    const { group, mcd } = this.groupOrThrow(id);
    const className = mcd.spec?.template.spec?.class?.name ?? '';
    const cls = this.opts.informers.machineClasses.get(group.namespace, className);
    let t = this.templates.get(mcd);
    if (t === undefined || t.cls !== cls || t.groupId !== group.id) {
      const built = buildTemplateNode(group.id, mcd, cls);
      let answer: Buffer | GrpcStatusError;
      if ('unavailable' in built) {
        answer = unimplemented(`no template for node group ${group.id}: ${built.unavailable}`);
      } else {
        const bytes = encodeNode(built.node);
        answer = encodeResponse('NodeGroupTemplateNodeInfo', { nodeInfo: bytes, nodeBytes: bytes });
      }
      t = { cls, groupId: group.id, answer };
      this.templates.set(mcd, t);
    }
    if (t.answer instanceof GrpcStatusError) throw t.answer;
    return t.answer;
  }

  // ---- writes ---------------------------------------------------------------------------------

  /**
   * Runs fn with the group's lock held: scaling calls of one group never interleave. A call whose
   * deadline passes while it waits for the lock gives up without running fn.
   */
  private async locked<T>(groupId: string, deadline: number, fn: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(groupId) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const chain = previous.then(() => mine);
    this.locks.set(groupId, chain);
    try {
      const wait = deadline - this.opts.clock.now();
      const timer = new AbortController();
      const gotLock = await Promise.race([
        previous.then(() => true),
        this.opts.clock.sleep(Math.max(0, wait), timer.signal).then(
          () => false,
          () => false,
        ),
      ]);
      timer.abort();
      if (!gotLock) {
        throw deadlineExceeded(
          `node group ${groupId}: the call's deadline passed while an earlier scaling call of the group was running; nothing was changed`,
        );
      }
      return await fn();
    } finally {
      release();
      if (this.locks.get(groupId) === chain) this.locks.delete(groupId);
    }
  }

  /** Refuses a write that may not happen: this replica is not the leader, or the deadline passed. */
  private mayWrite(groupId: string, deadline: number): void {
    if (this.opts.fence?.allowed() === false) {
      throw unavailable(
        `this replica does not hold the leader Lease; node group ${groupId} was not changed (retry: the leader serves it)`,
      );
    }
    if (this.opts.clock.now() >= deadline) {
      throw deadlineExceeded(`node group ${groupId}: the call's deadline passed; nothing was changed`);
    }
  }

  /**
   * A signal that aborts at the call's deadline. The client itself cancels a write when this
   * replica may no longer write (it links the fence's signal to every write it sends).
   */
  private writeSignal(deadline: number): AbortSignal {
    return AbortSignal.timeout(Math.max(1, deadline - this.opts.clock.now()));
  }

  /**
   * Plans against the freshest deployment and writes it conditionally (resourceVersion), re-reading
   * and re-planning on a conflict until the call's deadline. One write per call: replicas and the
   * annotation change together or not at all. Nothing is written once the deadline has passed or
   * the replica lost its leadership; such a call answers DEADLINE_EXCEEDED or UNAVAILABLE.
   */
  private async write(
    id: string,
    deadline: number,
    plan: (
      group: NodeGroup,
      mcd: DeepReadonly<MachineDeployment>,
    ) => { patch: Record<string, unknown> | undefined; describe: string },
  ): Promise<unknown> {
    const first = this.groupOrThrow(id);
    this.mayWrite(first.group.id, deadline);
    return this.locked(first.group.id, deadline, async () => {
      let mcd = this.lookup.deployment(first.group) ?? first.mcd;
      for (;;) {
        const group = this.lookup.group(first.group.id) ?? first.group;
        const { patch, describe } = plan(group, mcd);
        if (patch === undefined) return {};
        this.mayWrite(group.id, deadline);
        const body = {
          ...patch,
          metadata: {
            ...((patch.metadata as object | undefined) ?? {}),
            resourceVersion: mcd.metadata.resourceVersion,
          },
        };
        try {
          const written = await this.opts.client.patch<MachineDeployment>(
            MachineDeploymentResource,
            group.name,
            body,
            { type: 'merge', namespace: group.namespace, signal: this.writeSignal(deadline) },
          );
          this.lookup.wrote(group, written);
          this.log.info('scaled node group', {
            group: group.id,
            change: describe,
            replicas: written.spec?.replicas,
          });
          return {};
        } catch (err) {
          if (isNotFound(err)) throw notFound(`machine deployment ${group.id} no longer exists`);
          if (!isConflict(err)) throw this.writeFailed(group.id, deadline, err);
          // Another writer changed the deployment: re-read it and decide again, within the deadline.
          this.log.debug('scaling write conflicted, re-reading the deployment', { group: group.id });
          try {
            await this.opts.clock.sleep(
              Math.min(CONFLICT_RETRY_MS, Math.max(0, deadline - this.opts.clock.now())),
            );
            this.mayWrite(group.id, deadline);
            mcd = await this.opts.client.get<MachineDeployment>(
              MachineDeploymentResource,
              group.name,
              group.namespace,
              this.writeSignal(deadline),
            );
          } catch (readErr) {
            if (readErr instanceof GrpcStatusError) throw readErr;
            if (isNotFound(readErr)) throw notFound(`machine deployment ${group.id} no longer exists`);
            throw this.writeFailed(group.id, deadline, readErr);
          }
        }
      }
    });
  }

  /** The answer for a scaling write that failed: why, in the autoscaler's terms. */
  private writeFailed(groupId: string, deadline: number, err: unknown): GrpcStatusError {
    if (err instanceof FencedError) {
      return unavailable(
        `this replica lost the leader Lease; node group ${groupId} was not changed (retry: the new leader serves it)`,
        { cause: err },
      );
    }
    if (this.opts.clock.now() >= deadline) {
      return deadlineExceeded(
        `node group ${groupId}: the call's deadline passed before the change was written (it may still land if the request had reached the API server)`,
        { cause: err },
      );
    }
    return unavailable(`updating machine deployment ${groupId} failed: ${errorMessage(err)}`, { cause: err });
  }

  private async increaseSize(id: string, delta: number, deadline: number): Promise<unknown> {
    return this.write(id, deadline, (group, mcd) => {
      const p = planIncrease(group, mcd, delta);
      if ('error' in p) throw p.error;
      return { patch: { spec: { replicas: p.replicas } }, describe: `+${delta}` };
    });
  }

  private deletionPatch(plan: DeletePlan): Record<string, unknown> | undefined {
    if (plan.replicas === undefined) return undefined;
    const annotations: Record<string, string> = {
      [Annotation.LastDeploymentReplicaChangeByScalerTime]: rfc3339(this.opts.clock.now()),
    };
    if (plan.trigger !== undefined) annotations[Annotation.TriggerDeletionByMCM] = plan.trigger;
    return { metadata: { annotations }, spec: { replicas: plan.replicas } };
  }

  private async deleteNodes(id: string, nodes: readonly WireNode[], deadline: number): Promise<unknown> {
    if (nodes.length === 0) throw invalidArgument('no nodes to delete');
    const { group } = this.groupOrThrow(id);
    // Resolve every node first: one foreign or unknown node refuses the whole call.
    const protectedNodes = new Map<string, string>();
    const machines = nodes.map((n) => {
      const ref = toRef(n);
      const m = this.lookup.machineForNode(ref);
      if (m === undefined) {
        throw invalidArgument(
          `node ${ref.name || ref.providerID} is not a machine of node group ${group.id}`,
        );
      }
      const owner = this.lookup.groupOfMachine(m);
      if (owner?.id !== group.id) {
        throw invalidArgument(
          `node ${ref.name || ref.providerID} (machine ${m.metadata.name ?? ''}) belongs to ${owner === undefined ? 'no node group' : `node group ${owner.id}`}, not ${group.id}`,
        );
      }
      const node = this.lookup.nodeOf(m);
      const disabled =
        node?.metadata.annotations?.[Annotation.ClusterAutoscalerScaleDownDisabled] ??
        n.annotations?.[Annotation.ClusterAutoscalerScaleDownDisabled];
      if (disabled === 'true') protectedNodes.set(m.metadata.name ?? '', ref.name || ref.providerID);
      return m;
    });
    return this.write(id, deadline, (g, mcd) => {
      const r = planDeleteNodes({
        group: g,
        mcd,
        sets: this.lookup.sets(mcd),
        machines,
        going: this.going(mcd),
        now: this.opts.clock.now(),
      });
      if ('error' in r) throw r.error;
      const refused = r.plan.marked.filter((name) => protectedNodes.has(name));
      if (refused.length > 0) {
        throw failedPrecondition(
          `node(s) ${refused.map((name) => protectedNodes.get(name)).join(', ')} carry ` +
            `${Annotation.ClusterAutoscalerScaleDownDisabled}=true (a preserved machine, or set by hand); ` +
            'remove the annotation to allow their scale-down',
        );
      }
      return {
        patch: this.deletionPatch(r.plan),
        describe: `delete ${r.plan.marked.join(',')}${r.plan.already.length > 0 ? ` (already going: ${r.plan.already.join(',')})` : ''}`,
      };
    });
  }

  private async decreaseTargetSize(id: string, delta: number, deadline: number): Promise<unknown> {
    return this.write(id, deadline, (g, mcd) => {
      const r = planDecrease({
        group: g,
        mcd,
        sets: this.lookup.sets(mcd),
        machines: this.lookup.machines(mcd),
        registered: (m) => isRegistered(m, this.lookup.nodeOf(m), this.justReadyHold(g)),
        going: this.going(mcd),
        delta,
        now: this.opts.clock.now(),
      });
      if ('error' in r) throw r.error;
      return {
        patch: this.deletionPatch(r.plan),
        describe: `${delta} (unregistered: ${r.plan.marked.join(',') || 'none'})`,
      };
    });
  }
}

function done(recorder: CallRecorder, started: number, code: string): void {
  recorder.record(code, (performance.now() - started) / 1000);
}

/** The call's deadline in epoch milliseconds (30 s from now when the client set none). */
function deadlineOf(call: UnaryCall): number {
  return Number.isFinite(call.deadline) ? call.deadline : Date.now() + 30_000;
}

/**
 * A request as it may be logged: a pod (PricingPodPrice) is the user's whole pod spec, environment
 * values included, so only its size is shown.
 */
export function loggable(request: unknown): unknown {
  if (typeof request !== 'object' || request === null) return request;
  const r = request as Record<string, unknown>;
  if (!Buffer.isBuffer(r.pod_bytes) && !Buffer.isBuffer(r.pod)) return request;
  const size = (b: unknown): string | undefined => (Buffer.isBuffer(b) ? `<${b.length} bytes>` : undefined);
  return { ...r, pod_bytes: size(r.pod_bytes), pod: size(r.pod) };
}

function toRef(n: WireNode): NodeRef {
  return { providerID: n.providerID ?? '', name: n.name ?? '', labels: n.labels ?? {} };
}
