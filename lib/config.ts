/**
 * Command-line configuration of the manager. Flag names and defaults follow gardener MCM's
 * machine-controller-manager where it has the flag; additions are marked.
 */

export const CONTROLLER_NAMES = ['machineset', 'machinedeployment', 'safety'] as const;
export type ControllerName = (typeof CONTROLLER_NAMES)[number];

export interface ManagerConfig {
  /** Kubeconfig of the cluster holding the machine.sapcloud.io objects; '' = in-cluster/default. */
  controlKubeconfig: string;
  /** Kubeconfig of the cluster the nodes join; '' = same as control, 'none' = no target cluster. */
  targetKubeconfig: string;
  namespace: string;
  concurrentSyncs: number;
  minResyncPeriodMs: number;
  kubeApiQps: number;
  kubeApiBurst: number;
  safetyUp: number;
  safetyDown: number;
  machineSafetyOvershootingPeriodMs: number;
  autoscalerScaleDownAnnotationDuringRollout: boolean;
  leaderElect: boolean;
  leaderElectLeaseDurationMs: number;
  leaderElectRenewDeadlineMs: number;
  leaderElectRetryPeriodMs: number;
  leaderElectResourceLock: 'leases';
  /** Lease name (addition; MCM hard-codes it). */
  leaderElectResourceName: string;
  address: string;
  port: number;
  verbosity: number;
  /** Addition: json (default) or text. */
  logFormat: 'json' | 'text';
  /** Addition: which controllers run. */
  controllers: ControllerName[];
}

export const defaultConfig: ManagerConfig = {
  controlKubeconfig: '',
  targetKubeconfig: '',
  namespace: 'default',
  concurrentSyncs: 10,
  minResyncPeriodMs: 12 * 3600_000,
  kubeApiQps: 20,
  kubeApiBurst: 30,
  safetyUp: 2,
  safetyDown: 1,
  machineSafetyOvershootingPeriodMs: 60_000,
  autoscalerScaleDownAnnotationDuringRollout: true,
  leaderElect: true,
  leaderElectLeaseDurationMs: 15_000,
  leaderElectRenewDeadlineMs: 10_000,
  leaderElectRetryPeriodMs: 2_000,
  leaderElectResourceLock: 'leases',
  leaderElectResourceName: 'machine-controller-manager',
  address: '0.0.0.0',
  port: 10258,
  verbosity: 2,
  logFormat: 'json',
  controllers: [...CONTROLLER_NAMES],
};

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const durationUnits: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** Parses a Go duration ("90s", "1h30m", "500ms", "0") to milliseconds. */
export function parseDuration(s: string): number {
  const text = s.trim();
  if (text === '0') return 0;
  const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/gy;
  let total = 0;
  let consumed = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const [whole, num, unit] = m;
    if (num === undefined || unit === undefined) break;
    total += Number(num) * (durationUnits[unit] ?? 0);
    consumed += whole.length;
  }
  if (consumed !== text.length || consumed === 0)
    throw new ConfigError(`invalid duration "${s}" (e.g. 90s, 10m, 1h30m)`);
  return total;
}

function parseBool(name: string, v: string): boolean {
  if (v === 'true' || v === '1' || v === 'True') return true;
  if (v === 'false' || v === '0' || v === 'False') return false;
  throw new ConfigError(`--${name}: expected true or false, got "${v}"`);
}

function parseNumber(name: string, v: string, opts: { min?: number; integer?: boolean } = {}): number {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n))
    throw new ConfigError(`--${name}: expected a number, got "${v}"`);
  if (opts.integer === true && !Number.isInteger(n))
    throw new ConfigError(`--${name}: expected an integer, got "${v}"`);
  if (opts.min !== undefined && n < opts.min)
    throw new ConfigError(`--${name}: must be >= ${opts.min}, got ${v}`);
  return n;
}

type Setter = (c: ManagerConfig, v: string, name: string) => void;

const flags: Record<string, { help: string; set: Setter; boolean?: true }> = {
  'control-kubeconfig': {
    help: 'kubeconfig of the cluster with the Machine objects (default: in-cluster or $KUBECONFIG)',
    set: (c, v) => (c.controlKubeconfig = v),
  },
  'target-kubeconfig': {
    help: "kubeconfig of the cluster nodes join (default: the control cluster; 'none' for no target cluster)",
    set: (c, v) => (c.targetKubeconfig = v),
  },
  namespace: { help: 'namespace of the machine objects to manage', set: (c, v) => (c.namespace = v) },
  'concurrent-syncs': {
    help: 'workers per controller',
    set: (c, v, n) => (c.concurrentSyncs = parseNumber(n, v, { min: 1, integer: true })),
  },
  'min-resync-period': {
    help: 'informer resync period',
    set: (c, v) => (c.minResyncPeriodMs = parseDuration(v)),
  },
  'kube-api-qps': {
    help: 'sustained requests per second to the API server',
    set: (c, v, n) => (c.kubeApiQps = parseNumber(n, v, { min: Number.MIN_VALUE })),
  },
  'kube-api-burst': {
    help: 'request burst to the API server',
    set: (c, v, n) => (c.kubeApiBurst = parseNumber(n, v, { min: 1, integer: true })),
  },
  'safety-up': {
    help: 'machines over the limit that freeze a MachineSet',
    set: (c, v, n) => (c.safetyUp = parseNumber(n, v, { min: 0, integer: true })),
  },
  'safety-down': {
    help: 'machines under the freeze limit that unfreeze it',
    set: (c, v, n) => (c.safetyDown = parseNumber(n, v, { min: 0, integer: true })),
  },
  'machine-safety-overshooting-period': {
    help: 'how often every MachineSet is checked for overshooting',
    set: (c, v) => (c.machineSafetyOvershootingPeriodMs = parseDuration(v)),
  },
  'autoscaler-scaledown-annotation-during-rollout': {
    help: 'protect nodes from cluster-autoscaler scale-down during rollouts',
    set: (c, v, n) => (c.autoscalerScaleDownAnnotationDuringRollout = parseBool(n, v)),
    boolean: true,
  },
  'leader-elect': {
    help: 'run leader election (needed with more than one replica)',
    set: (c, v, n) => (c.leaderElect = parseBool(n, v)),
    boolean: true,
  },
  'leader-elect-lease-duration': {
    help: 'how long followers wait before taking over a lease',
    set: (c, v) => (c.leaderElectLeaseDurationMs = parseDuration(v)),
  },
  'leader-elect-renew-deadline': {
    help: 'how long the leader retries renewing before giving up',
    set: (c, v) => (c.leaderElectRenewDeadlineMs = parseDuration(v)),
  },
  'leader-elect-retry-period': {
    help: 'time between lease acquire/renew attempts',
    set: (c, v) => (c.leaderElectRetryPeriodMs = parseDuration(v)),
  },
  'leader-elect-resource-lock': {
    help: "lock type; only 'leases' is supported",
    set: (c, v, n) => {
      if (v !== 'leases') throw new ConfigError(`--${n}: only "leases" is supported, got "${v}"`);
      c.leaderElectResourceLock = 'leases';
    },
  },
  'leader-elect-resource-name': {
    help: 'name of the Lease (in --namespace)',
    set: (c, v) => (c.leaderElectResourceName = v),
  },
  address: { help: 'bind address of the metrics/health HTTP server', set: (c, v) => (c.address = v) },
  port: {
    help: 'port of the metrics/health HTTP server (0: any free port)',
    set: (c, v, n) => (c.port = parseNumber(n, v, { min: 0, integer: true })),
  },
  v: {
    help: 'log verbosity (klog levels: 3 verbose, 4 debug, 5 trace)',
    set: (c, v, n) => (c.verbosity = parseNumber(n, v, { min: 0, integer: true })),
  },
  'log-format': {
    help: 'json or text',
    set: (c, v, n) => {
      if (v !== 'json' && v !== 'text') throw new ConfigError(`--${n}: expected json or text, got "${v}"`);
      c.logFormat = v;
    },
  },
  controllers: {
    help: `comma-separated controllers to run (${CONTROLLER_NAMES.join(', ')}; * for all)`,
    set: (c, v, n) => {
      if (v === '*') {
        c.controllers = [...CONTROLLER_NAMES];
        return;
      }
      const names = v
        .split(',')
        .map((x) => x.trim())
        .filter((x) => x !== '');
      for (const name of names) {
        if (!(CONTROLLER_NAMES as readonly string[]).includes(name)) {
          throw new ConfigError(
            `--${n}: unknown controller "${name}" (known: ${CONTROLLER_NAMES.join(', ')})`,
          );
        }
      }
      c.controllers = names as ControllerName[];
    },
  },
};

/** Flags accepted for compatibility with gardener MCM deployments; they have no effect here. */
const ignoredFlags = new Set([
  'kube-api-content-type',
  'profiling',
  'contention-profiling',
  'cloud-provider',
  'controller-start-interval',
]);

export function usage(): string {
  const lines = ['Usage: machine-controller-manager [flags]', '', 'Flags:'];
  for (const [name, f] of Object.entries(flags))
    lines.push(`  --${name}${f.boolean === true ? '[=true|false]' : '=value'}\n      ${f.help}`);
  lines.push(
    `  (accepted and ignored for MCM compatibility: ${[...ignoredFlags].map((f) => `--${f}`).join(', ')})`,
  );
  return lines.join('\n');
}

/** Parses argv (without node and script) into a validated configuration. */
export function parseArgs(argv: readonly string[]): ManagerConfig | 'help' {
  const c: ManagerConfig = { ...defaultConfig, controllers: [...defaultConfig.controllers] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (arg === '--help' || arg === '-h') return 'help';
    if (!arg.startsWith('-')) throw new ConfigError(`unexpected argument "${arg}"`);
    const body = arg.replace(/^--?/, '');
    const eq = body.indexOf('=');
    const name = eq >= 0 ? body.slice(0, eq) : body;
    let value = eq >= 0 ? body.slice(eq + 1) : undefined;
    const spec = flags[name];
    if (spec === undefined) {
      if (ignoredFlags.has(name)) {
        if (value === undefined && argv[i + 1] !== undefined && !(argv[i + 1] ?? '').startsWith('-')) i++;
        continue;
      }
      throw new ConfigError(`unknown flag --${name} (see --help)`);
    }
    if (value === undefined) {
      if (spec.boolean === true) value = 'true';
      else {
        const next = argv[i + 1];
        if (next === undefined) throw new ConfigError(`flag --${name} needs a value`);
        value = next;
        i++;
      }
    }
    spec.set(c, value, name);
  }
  validate(c);
  return c;
}

export function validate(c: ManagerConfig): void {
  if (c.port > 65535) throw new ConfigError(`--port must be 0..65535, got ${c.port}`);
  if (c.targetKubeconfig === 'none' && c.controlKubeconfig === '') {
    throw new ConfigError('--control-kubeconfig is required when --target-kubeconfig=none');
  }
  if (c.leaderElect) {
    if (c.leaderElectLeaseDurationMs <= c.leaderElectRenewDeadlineMs) {
      throw new ConfigError(
        '--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline',
      );
    }
    if (c.leaderElectRenewDeadlineMs <= c.leaderElectRetryPeriodMs * 1.2) {
      throw new ConfigError(
        '--leader-elect-renew-deadline must be greater than 1.2 x --leader-elect-retry-period',
      );
    }
  }
  if (c.controllers.length === 0) throw new ConfigError('--controllers: at least one controller must run');
}
