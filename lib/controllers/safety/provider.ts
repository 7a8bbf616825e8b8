import type { ProviderRegistry } from '../../driver/registry.js';
import type { ControllerContext } from '../context.js';
import type { KubeApi } from '../../kube/client.js';
import { ApiServerSafety, apiServerProber } from './apiserver.js';
import { UnmanagedNodeController } from './nodes.js';
import { OrphanVmCollector } from './orphans.js';

export interface ProviderSafetyOptions {
  providers: ProviderRegistry;
  /** --machine-safety-orphan-vms-period */
  orphanVmsPeriodMs: number;
  /** --machine-safety-apiserver-statuscheck-period */
  statusCheckPeriodMs: number;
  /** --machine-safety-apiserver-statuscheck-timeout */
  statusCheckTimeoutMs: number;
  /** --machine-creation-timeout (nodes younger than this are not judged unmanaged) */
  creationTimeoutMs: number;
  /** Clients the API-server probes use (default: the controllers' own). */
  probeClients?: { control: KubeApi; target: KubeApi | undefined };
  /** Whether the machine controller is creating the VM of `namespace/name` right now. */
  creationInFlight: (key: string) => boolean;
  /** After an unfreeze: every machine needs a pass. */
  onUnfreeze: () => void;
}

/**
 * The machine controller's safety workers (gardener MCM's machine_safety.go): the API-server
 * freeze, orphan VM collection, and the not-managed annotation of nodes without machines
 * (with a target cluster only). Orphan collection and node marking pause while frozen.
 */
export class ProviderSafety {
  readonly apiServer: ApiServerSafety;
  readonly orphans: OrphanVmCollector;
  readonly nodes: UnmanagedNodeController | undefined;

  constructor(ctx: ControllerContext, opts: ProviderSafetyOptions) {
    this.apiServer = new ApiServerSafety(ctx, {
      periodMs: opts.statusCheckPeriodMs,
      timeoutMs: opts.statusCheckTimeoutMs,
      onUnfreeze: opts.onUnfreeze,
      ...(opts.probeClients === undefined
        ? {}
        : {
            prober: apiServerProber(
              opts.probeClients.control,
              ctx.target === undefined ? undefined : opts.probeClients.target,
              ctx.namespace,
            ),
          }),
    });
    const frozen = (): boolean => this.apiServer.isFrozen();
    this.orphans = new OrphanVmCollector(ctx, {
      providers: opts.providers,
      periodMs: opts.orphanVmsPeriodMs,
      frozen,
      creationInFlight: opts.creationInFlight,
    });
    this.nodes =
      ctx.target === undefined || ctx.informers.nodes === undefined
        ? undefined
        : new UnmanagedNodeController(ctx, {
            creationTimeoutMs: opts.creationTimeoutMs,
            periodMs: opts.orphanVmsPeriodMs,
            frozen,
          });
  }

  isFrozen(): boolean {
    return this.apiServer.isFrozen();
  }

  start(): void {
    this.apiServer.start();
    this.orphans.start();
    this.nodes?.start();
  }

  async stop(): Promise<void> {
    await Promise.all([this.apiServer.stop(), this.orphans.stop(), this.nodes?.stop()]);
  }
}
