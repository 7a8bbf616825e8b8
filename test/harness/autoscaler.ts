/**
 * A real cluster-autoscaler process (one of the pinned versions, built by hack/tools.sh) against a
 * harness control plane, with `--cloud-provider=externalgrpc` pointed at a gRPC server of the test.
 */
import { closeSync, openSync, readSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import type { ControlPlane } from './controlplane.js';
import { httpGetText } from './http.js';
import { ManagedProcess, freePort, waitUntil } from './process.js';
import { autoscalerBinaryPath, autoscalerUnavailableReason } from './tools.js';

/** Client side of the externalgrpc connection, written into the cloud-config file. */
export interface AutoscalerGrpcTarget {
  /** `host:port` of the externalgrpc server; the host must be in the server certificate. */
  address: string;
  /** mTLS: PEM files of the client certificate and key and of the CA that issued the server's certificate. Omitted: plaintext. */
  tls?: { certFile: string; keyFile: string; caFile: string };
  /** Per-RPC timeout as a Go duration (cloud-config `grpc_timeout`; CA's default is 5s). */
  grpcTimeout?: string;
}

export interface AutoscalerOptions extends AutoscalerGrpcTarget {
  /** A pinned version (see autoscalerVersions()). */
  version: string;
  controlPlane: ControlPlane;
  /**
   * Flags by name without the dashes, merged over the test defaults (autoscalerDefaultFlags);
   * `null` removes a default. Values are passed as `--name=value`.
   */
  flags?: Record<string, string | number | boolean | null>;
  /** Log verbosity (`--v`); default 4 (decisions). 5 logs every gRPC call. */
  verbosity?: number;
  /** How long start-up may take until /health-check answers (default 30 s). */
  startTimeoutMs?: number;
}

/** A running cluster-autoscaler. */
export interface Autoscaler {
  readonly version: string;
  readonly pid: number | undefined;
  readonly running: boolean;
  /** The process's stdout and stderr (klog), in the control plane's log directory. */
  readonly logFile: string;
  readonly cloudConfigFile: string;
  /** Every argument it was started with. */
  readonly args: readonly string[];
  /** Port of `--address` (metrics and health check on 127.0.0.1). */
  readonly port: number;
  /** `http://127.0.0.1:<port>/metrics`. */
  readonly metricsUrl: string;
  /** The whole log so far. */
  log(): string;
  /**
   * Resolves with the first match of re in the log, from the start of the process (or from
   * `fromOffset`, e.g. a value of logSize() taken earlier); rejects after timeoutMs (default 30 s)
   * or when the process exits, with the log's tail.
   */
  waitForLog(re: RegExp, opts?: { timeoutMs?: number; fromOffset?: number }): Promise<RegExpExecArray>;
  /** Current size of the log in bytes (a starting point for waitForLog). */
  logSize(): number;
  /** The Prometheus text of /metrics. */
  metrics(): Promise<string>;
  /** SIGTERM, then SIGKILL after graceMs (default 10 s); resolves when the process is gone. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL. */
  kill(): Promise<void>;
}

/** Flags introduced after the oldest pinned version: name → first version that has it. */
const FLAG_SINCE: Record<string, string> = {
  'max-node-startup-time': '1.35.0',
};

function versionAtLeast(version: string, min: string): boolean {
  const a = version.split('.').map(Number);
  const b = min.split('.').map(Number);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x !== y) return x > y;
  }
  return true;
}

/** Whether a flag that the harness knows was added later exists in this version. */
export function autoscalerHasFlag(version: string, flag: string): boolean {
  const since = FLAG_SINCE[flag];
  return since === undefined || versionAtLeast(version, since);
}

/**
 * The flags the harness starts every cluster-autoscaler with (besides kubeconfig, cloud provider,
 * cloud config, address and verbosity): loops every second and short timers, so that scale-up
 * and scale-down happen within seconds. Every flag exists in all pinned versions except those
 * in FLAG_SINCE, which are left out for older versions.
 */
export function autoscalerDefaultFlags(version: string): Record<string, string | number | boolean> {
  const flags: Record<string, string | number | boolean> = {
    'leader-elect': false,
    namespace: 'kube-system',
    'scan-interval': '1s',
    expander: 'least-waste',
    'scale-down-enabled': true,
    'scale-down-delay-after-add': '5s',
    'scale-down-delay-after-delete': '0s',
    'scale-down-delay-after-failure': '5s',
    'scale-down-unneeded-time': '5s',
    'scale-down-unready-time': '30s',
    'unremovable-node-recheck-timeout': '5s',
    'max-node-provision-time': '60s',
    'max-node-startup-time': '60s',
    'node-delete-delay-after-taint': '0s',
    'max-graceful-termination-sec': 5,
    'skip-nodes-with-local-storage': false,
    'skip-nodes-with-system-pods': false,
    'new-pod-scale-up-delay': '0s',
    // Pods with a priority below this are expendable: never trigger a scale-up, never block a
    // scale-down (the upstream default, stated so tests can rely on it).
    'expendable-pods-priority-cutoff': -10,
    'write-status-configmap': true,
  };
  for (const name of Object.keys(flags)) {
    if (!autoscalerHasFlag(version, name)) Reflect.deleteProperty(flags, name);
  }
  return flags;
}

/** The externalgrpc cloud-config YAML (keys as the externalgrpc provider reads them). */
export function externalGrpcCloudConfig(target: AutoscalerGrpcTarget): string {
  const lines = [`address: ${JSON.stringify(target.address)}`];
  if (target.tls !== undefined) {
    lines.push(
      `cert: ${JSON.stringify(target.tls.certFile)}`,
      `key: ${JSON.stringify(target.tls.keyFile)}`,
      `cacert: ${JSON.stringify(target.tls.caFile)}`,
    );
  }
  if (target.grpcTimeout !== undefined) lines.push(`grpc_timeout: ${JSON.stringify(target.grpcTimeout)}`);
  return lines.join('\n') + '\n';
}

function readFrom(file: string, offset: number): string {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch {
    return '';
  }
  try {
    const size = statSync(file).size;
    if (size <= offset) return '';
    const buf = Buffer.alloc(size - offset);
    readSync(fd, buf, 0, buf.length, offset);
    return buf.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * The autoscaler's environment: the test process's, except that
 * - the in-cluster variables are unset (they would win over --kubeconfig in some client paths);
 * - TZ=UTC: klog stamps each line with the process's local time, without zone or year, and Go
 *   prints a time.Time (the end of a back-off, say) in local time too. In UTC those read the same
 *   whatever the machine's zone, and the same as in Node (Go falls back to UTC for a zone it has
 *   no zoneinfo for, Node does not). klogTime relies on it.
 */
export function autoscalerProcessEnv(parent: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { ...parent, KUBERNETES_SERVICE_HOST: '', KUBERNETES_SERVICE_PORT: '', TZ: 'UTC' };
}

/**
 * The time of a klog line of an autoscaler the harness started (`I1128 08:12:34.567890 …`: month,
 * day and time of day in UTC, since the harness runs it with TZ=UTC; no year), in ms since the
 * epoch. The year is the one that puts the line nearest to `near` (a time the test took while the
 * process ran), so a line from Dec 31 read on Jan 1 is last year's. Undefined: not a klog line.
 */
export function klogTime(line: string, near: number): number | undefined {
  const m = /^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6})/.exec(line);
  if (m === null) return undefined;
  const field = (i: number): number => Number(m[i]);
  const [month, day] = [field(1), field(2)];
  const year = new Date(near).getUTCFullYear();
  let best: number | undefined;
  for (const y of [year - 1, year, year + 1]) {
    const t = Date.UTC(y, month - 1, day, field(3), field(4), field(5), Math.floor(field(6) / 1000));
    const d = new Date(t);
    // Feb 29 exists in leap years only (Date.UTC would roll it over to Mar 1).
    if (d.getUTCMonth() !== month - 1 || d.getUTCDate() !== day) continue;
    if (best === undefined || Math.abs(t - near) < Math.abs(best - near)) best = t;
  }
  return best;
}

const instances = new WeakMap<ControlPlane, number>();

class AutoscalerProcess implements Autoscaler {
  readonly metricsUrl: string;

  constructor(
    readonly version: string,
    private readonly proc: ManagedProcess,
    readonly cloudConfigFile: string,
    readonly port: number,
  ) {
    this.metricsUrl = `http://127.0.0.1:${port}/metrics`;
  }

  get pid(): number | undefined {
    return this.proc.pid;
  }

  get running(): boolean {
    return this.proc.running;
  }

  get logFile(): string {
    return this.proc.opts.logFile;
  }

  get args(): readonly string[] {
    return this.proc.opts.args;
  }

  log(): string {
    return readFrom(this.logFile, 0);
  }

  logSize(): number {
    try {
      return statSync(this.logFile).size;
    } catch {
      return 0;
    }
  }

  async waitForLog(
    re: RegExp,
    opts: { timeoutMs?: number; fromOffset?: number } = {},
  ): Promise<RegExpExecArray> {
    const from = opts.fromOffset ?? 0;
    // A global regex's lastIndex must not carry over between polls.
    const pattern = new RegExp(re.source, re.flags.replace('g', ''));
    const found: { match: RegExpExecArray | null } = { match: null };
    const check = (): boolean => {
      found.match = pattern.exec(readFrom(this.logFile, from));
      return found.match !== null;
    };
    try {
      await waitUntil(
        `cluster-autoscaler ${this.version}: log line ${String(re)}`,
        () => Promise.resolve(check()),
        {
          timeoutMs: opts.timeoutMs ?? 30_000,
          intervalMs: 100,
          process: this.proc,
        },
      );
    } catch (err) {
      // The process may have written the line and exited since the last poll.
      if (check() && found.match !== null) return found.match;
      throw err;
    }
    if (found.match === null)
      throw new Error(`cluster-autoscaler ${this.version}: no match for ${String(re)}`);
    return found.match;
  }

  async metrics(): Promise<string> {
    const r = await httpGetText(this.metricsUrl);
    if (r.status !== 200) throw new Error(`GET ${this.metricsUrl}: HTTP ${r.status}`);
    return r.text;
  }

  stop(graceMs = 10_000): Promise<void> {
    return this.proc.stop(graceMs);
  }

  kill(): Promise<void> {
    return this.proc.kill();
  }
}

/**
 * Starts cluster-autoscaler `opts.version` against the control plane: `--kubeconfig` of the
 * control plane, `--cloud-provider=externalgrpc`, a cloud-config file written next to its log in
 * the control plane's work directory, `--address=127.0.0.1:<free port>`, the test defaults
 * (autoscalerDefaultFlags) merged with `opts.flags`, and `--v`. Resolves once /health-check
 * answers; fails fast with the log's tail if the process exits (e.g. an unknown flag). The
 * process is stopped by the harness's exit hook at the latest, but call stop().
 *
 * The gRPC server does not need to be up: the autoscaler dials lazily and retries every loop.
 * A version whose binary cannot exist here throws; check autoscalerUnavailableReason() first.
 */
export async function startAutoscaler(opts: AutoscalerOptions): Promise<Autoscaler> {
  const binary = autoscalerBinaryPath(opts.version);
  const cp = opts.controlPlane;
  const n = (instances.get(cp) ?? 0) + 1;
  instances.set(cp, n);
  const name = `cluster-autoscaler-${opts.version}-${n}`;
  const cloudConfigFile = path.join(cp.workDir, `${name}.cloud-config.yaml`);
  writeFileSync(cloudConfigFile, externalGrpcCloudConfig(opts), { mode: 0o600 });
  const port = await freePort();
  const flags: Record<string, string | number | boolean | null> = {
    ...autoscalerDefaultFlags(opts.version),
    ...(opts.flags ?? {}),
    kubeconfig: cp.kubeconfigPath,
    'cloud-provider': 'externalgrpc',
    'cloud-config': cloudConfigFile,
    address: `127.0.0.1:${port}`,
    v: opts.verbosity ?? 4,
  };
  const args = Object.entries(flags)
    .filter((e): e is [string, string | number | boolean] => e[1] !== null)
    .map(([k, v]) => `--${k}=${String(v)}`);
  const proc = new ManagedProcess({
    name: `cluster-autoscaler-${opts.version}`,
    command: binary,
    args,
    logFile: path.join(cp.logDir, `${name}.log`),
    env: autoscalerProcessEnv(process.env),
  });
  proc.start();
  const ca = new AutoscalerProcess(opts.version, proc, cloudConfigFile, port);
  try {
    await waitUntil(
      `cluster-autoscaler ${opts.version}`,
      async () => (await httpGetText(`http://127.0.0.1:${port}/health-check`)).status === 200,
      { timeoutMs: opts.startTimeoutMs ?? 30_000, intervalMs: 100, process: proc },
    );
  } catch (err) {
    await proc.stop(2000);
    throw err;
  }
  return ca;
}

/**
 * Fails (never skips) when this cluster-autoscaler version cannot exist here, with a message
 * saying what is missing: a suite that silently skips its autoscaler versions would pass without
 * testing them. A version that could be built but is not fails too, in startAutoscaler, with the
 * command to run.
 */
export function requireAutoscaler(version: string): void {
  const reason = autoscalerUnavailableReason(version);
  if (reason !== undefined) throw new Error(`cannot run cluster-autoscaler ${version}: ${reason}`);
}

/** One "Disabling scale-up" line of a cluster-autoscaler log: a back-off of a node group. */
export interface GroupBackOff {
  /** The line's time (klogTime), ms since the epoch. */
  at: number | undefined;
  /** The end of the back-off the line states, ms since the epoch (undefined: not read). */
  until: number | undefined;
  /** The instance error class: OutOfResource, Other (cloudprovider.InstanceErrorClass), or ''. */
  errorClass: string;
  /** The error code of the failed scale-up (ours: the machine's lastOperation errorCode). */
  errorCode: string;
}

/**
 * The back-offs a cluster-autoscaler log records for `group`, in log order. The end of a back-off
 * is a Go time.Time printed in UTC (the harness runs the autoscaler with TZ=UTC), e.g.
 * `2026-11-28 08:13:04.567890123 +0000 UTC m=+42.1`; `near` is a time the test took while the
 * process ran (see klogTime).
 */
export function backOffsOf(log: string, group: string, near: number): GroupBackOff[] {
  const marker = `Disabling scale-up for node group ${group} until `;
  const out: GroupBackOff[] = [];
  for (const line of log.split('\n')) {
    const start = line.indexOf(marker);
    if (start < 0) continue;
    const rest = line.slice(start + marker.length);
    const until = /^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})(\.\d{1,3})?\d* \+0000 UTC/.exec(rest);
    out.push({
      at: klogTime(line, near),
      until: until === null ? undefined : Date.parse(`${until[1]}T${until[2]}${until[3] ?? ''}Z`),
      errorClass: /; errorClass=([^;]*)/.exec(rest)?.[1] ?? '',
      errorCode: /; errorCode=(.*)$/.exec(rest)?.[1]?.trim() ?? '',
    });
  }
  return out;
}

/**
 * Whether a cluster-autoscaler log says it backed `group` off for lack of resources (errorClass
 * OutOfResource: what our server reports for a ResourceExhausted machine) or for another creation
 * error its instances reported (errorClass Other with the instance's error code: a Failed machine,
 * or one whose launch is held because its class's launches keep failing), and whether it says the
 * group's scale-up timed out (max-node-provision-time), which backs it off as well (errorClass
 * Other, errorCode timeout: not counted as a creation error).
 */
export function backOffOf(
  log: string,
  group: string,
): { outOfResource: boolean; creationError: boolean; timedOut: boolean } {
  const backOffs = backOffsOf(log, group, Date.now());
  return {
    outOfResource: backOffs.some((b) => b.errorClass === 'OutOfResource'),
    creationError: backOffs.some((b) => b.errorClass === 'Other' && b.errorCode !== 'timeout'),
    timedOut: log.split('\n').some((l) => l.includes(`Scale-up timed out for node group ${group} after`)),
  };
}
