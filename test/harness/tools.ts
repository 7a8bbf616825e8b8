import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Repository root (this file is compiled to dist/test/harness/tools.js). */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

export interface ToolVersions {
  ETCD_VERSION: string;
  KUBERNETES_VERSION: string;
  /** Comma-separated older Kubernetes releases the compatibility suites run on. */
  KUBERNETES_COMPAT_VERSIONS: string;
  KWOK_VERSION: string;
  HELM_VERSION: string;
  CLUSTER_AUTOSCALER_VERSION: string;
  /** Comma-separated cluster-autoscaler versions built from the source tarballs. */
  CLUSTER_AUTOSCALER_SOURCE_VERSIONS: string;
  /** gardener machine-controller-manager, the scale benchmark's anchor. */
  MCM_ANCHOR_VERSION: string;
  /** moto, the EC2 emulator (PyPI). */
  MOTO_VERSION: string;
  /** gardener's AWS provider, the AWS benchmark's anchor. */
  MCM_AWS_ANCHOR_VERSION: string;
  /** Debian's prometheus package (Prometheus and promtool). */
  PROMETHEUS_DEB_VERSION: string;
}

/** Reads hack/versions.env, the single list of pinned component versions. */
export function readToolVersions(): ToolVersions {
  const text = readFileSync(path.join(repoRoot, 'hack', 'versions.env'), 'utf8');
  const values: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z_]+)=(\S+)\s*$/.exec(line.trim());
    if (m?.[1] !== undefined && m[2] !== undefined) values[m[1]] = m[2];
  }
  const get = (k: keyof ToolVersions): string => {
    const v = values[k];
    if (v === undefined) throw new Error(`hack/versions.env has no ${k}`);
    return v;
  };
  return {
    ETCD_VERSION: get('ETCD_VERSION'),
    KUBERNETES_VERSION: get('KUBERNETES_VERSION'),
    KUBERNETES_COMPAT_VERSIONS: get('KUBERNETES_COMPAT_VERSIONS'),
    KWOK_VERSION: get('KWOK_VERSION'),
    HELM_VERSION: get('HELM_VERSION'),
    CLUSTER_AUTOSCALER_VERSION: get('CLUSTER_AUTOSCALER_VERSION'),
    CLUSTER_AUTOSCALER_SOURCE_VERSIONS: get('CLUSTER_AUTOSCALER_SOURCE_VERSIONS'),
    MCM_ANCHOR_VERSION: get('MCM_ANCHOR_VERSION'),
    MOTO_VERSION: get('MOTO_VERSION'),
    MCM_AWS_ANCHOR_VERSION: get('MCM_AWS_ANCHOR_VERSION'),
    PROMETHEUS_DEB_VERSION: get('PROMETHEUS_DEB_VERSION'),
  };
}

/** Same default as hack/tools.sh. */
export function toolsDir(): string {
  const env = process.env.MCM_TOOLS_DIR;
  if (env !== undefined && env !== '') return env;
  const cache = process.env.XDG_CACHE_HOME ?? path.join(homedir(), '.cache');
  return path.join(cache, 'mcm-ts', 'tools');
}

/** The Kubernetes releases the compatibility suites run on (KUBERNETES_COMPAT_VERSIONS), oldest first. */
export function kubernetesCompatVersions(): string[] {
  return readToolVersions()
    .KUBERNETES_COMPAT_VERSIONS.split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/**
 * The Kubernetes release the tests' control planes run: KUBERNETES_VERSION, or the one named by
 * MCM_KUBERNETES_VERSION (the compatibility suites), which must be pinned in hack/versions.env.
 */
export function kubernetesVersion(): string {
  const primary = readToolVersions().KUBERNETES_VERSION;
  const wanted = process.env.MCM_KUBERNETES_VERSION;
  if (wanted === undefined || wanted === '' || wanted === primary) return primary;
  const compat = kubernetesCompatVersions();
  if (!compat.includes(wanted)) {
    throw new Error(
      `MCM_KUBERNETES_VERSION=${wanted} is not pinned in hack/versions.env ` +
        `(KUBERNETES_VERSION ${primary}, KUBERNETES_COMPAT_VERSIONS ${compat.join(', ')})`,
    );
  }
  return wanted;
}

export type Binary =
  | 'etcd'
  | 'kube-apiserver'
  | 'kube-scheduler'
  | 'kube-controller-manager'
  | 'kubectl'
  | 'kwok'
  | 'helm'
  | 'cluster-autoscaler'
  | 'prometheus'
  | 'promtool';

const component: Record<Binary, { dir: string; version: keyof ToolVersions }> = {
  etcd: { dir: 'etcd', version: 'ETCD_VERSION' },
  'kube-apiserver': { dir: 'kube', version: 'KUBERNETES_VERSION' },
  'kube-scheduler': { dir: 'kube', version: 'KUBERNETES_VERSION' },
  'kube-controller-manager': { dir: 'kube', version: 'KUBERNETES_VERSION' },
  kubectl: { dir: 'kube', version: 'KUBERNETES_VERSION' },
  kwok: { dir: 'kwok', version: 'KWOK_VERSION' },
  helm: { dir: 'helm', version: 'HELM_VERSION' },
  'cluster-autoscaler': { dir: 'cluster-autoscaler', version: 'CLUSTER_AUTOSCALER_VERSION' },
  prometheus: { dir: 'prometheus', version: 'PROMETHEUS_DEB_VERSION' },
  promtool: { dir: 'prometheus', version: 'PROMETHEUS_DEB_VERSION' },
};

/** Directory of a component's build (bin/ and data such as kwok's stages/). */
export function componentDir(bin: Binary): string {
  const c = component[bin];
  const v = readToolVersions();
  let version = c.version === 'KUBERNETES_VERSION' ? kubernetesVersion() : v[c.version];
  // helm's default Kubernetes version is compiled in (hack/tools.sh): one build per minor.
  if (bin === 'helm')
    version += `-k8s${v.KUBERNETES_VERSION.replace(/^v/, '').split('.').slice(0, 2).join('.')}`;
  return path.join(toolsDir(), `${c.dir}-${version}`);
}

/** The hack/tools.sh component that builds a binary (`kube-v1.35.4` for a compatibility version). */
function buildComponent(bin: Binary): string {
  const c = component[bin];
  if (c.version === 'KUBERNETES_VERSION' && kubernetesVersion() !== readToolVersions().KUBERNETES_VERSION) {
    return `kube-${kubernetesVersion()}`;
  }
  return c.dir;
}

/**
 * Where a binary may be, best first: its component's bin/; for kube-apiserver also the component
 * `kube-apiserver`, the apiserver alone, which `npm start` builds before the rest of `kube`.
 */
function binaryCandidates(bin: Binary): string[] {
  const own = path.join(componentDir(bin), 'bin', bin);
  if (bin !== 'kube-apiserver' || kubernetesVersion() !== readToolVersions().KUBERNETES_VERSION) return [own];
  return [own, path.join(toolsDir(), `kube-apiserver-${readToolVersions().KUBERNETES_VERSION}`, 'bin', bin)];
}

/** Whether a binary is built (binaryPath would not throw). */
export function isBuilt(bin: Binary): boolean {
  return binaryCandidates(bin).some((p) => existsSync(p));
}

/** Absolute path of a built binary; throws with the command that builds it when it is missing. */
export function binaryPath(bin: Binary): string {
  const candidates = binaryCandidates(bin);
  const p = candidates.find((c) => existsSync(c));
  if (p === undefined) {
    throw new Error(
      `${bin} is not built (expected ${candidates[0] ?? bin}); run \`bash hack/tools.sh ${buildComponent(bin)}\` ` +
        '(or `npm run tools` for every component) first',
    );
  }
  return p;
}

// --- cluster-autoscaler, one build per version -----------------------------------------------------

/**
 * Every cluster-autoscaler version hack/tools.sh builds, oldest first: the module-proxy release
 * (CLUSTER_AUTOSCALER_VERSION) and the releases built from the source tarballs.
 */
export function autoscalerVersions(): string[] {
  const v = readToolVersions();
  const fromSources = v.CLUSTER_AUTOSCALER_SOURCE_VERSIONS.split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  return [v.CLUSTER_AUTOSCALER_VERSION, ...fromSources];
}

/** The newest pinned cluster-autoscaler version (what dev mode runs). */
export function newestAutoscalerVersion(): string {
  const all = autoscalerVersions();
  const newest = all[all.length - 1];
  if (newest === undefined) throw new Error('hack/versions.env pins no cluster-autoscaler version');
  return newest;
}

/**
 * The newest pinned cluster-autoscaler that is built or can be built here: the newest release
 * when its sources are there (or it is built), else an older one, down to the module-proxy release,
 * which any machine with the Go module proxy can build (dev mode on a bare clone).
 */
export function newestUsableAutoscalerVersion(): string {
  const usable = autoscalerVersions().filter((v) => autoscalerUnavailableReason(v) === undefined);
  const newest = usable[usable.length - 1];
  if (newest === undefined) throw new Error('no pinned cluster-autoscaler can be built here');
  return newest;
}

/** Same default as hack/tools.sh: ../shared/third_party/cluster-autoscaler beside the repository. */
export function autoscalerSourcesDir(): string {
  const env = process.env.MCM_CA_SOURCES_DIR;
  if (env !== undefined && env !== '') return env;
  return path.resolve(repoRoot, '..', 'shared', 'third_party', 'cluster-autoscaler');
}

function assertKnownAutoscalerVersion(version: string): void {
  const all = autoscalerVersions();
  if (!all.includes(version)) {
    throw new Error(
      `cluster-autoscaler ${version} is not pinned in hack/versions.env (pinned: ${all.join(', ')})`,
    );
  }
}

/** The hack/tools.sh component that builds a version, e.g. `cluster-autoscaler-1.36`. */
export function autoscalerComponent(version: string): string {
  return `cluster-autoscaler-${version.split('.').slice(0, 2).join('.')}`;
}

/** Directory of one cluster-autoscaler build (bin/cluster-autoscaler; proto/ for the proxy release). */
export function autoscalerDir(version: string): string {
  return path.join(toolsDir(), `cluster-autoscaler-${version}`);
}

function autoscalerBinaryLocation(version: string): string {
  return path.join(autoscalerDir(version), 'bin', 'cluster-autoscaler');
}

/**
 * Why a test that needs this cluster-autoscaler version cannot run here, or undefined when it can.
 * The only accepted reason is the one hack/tools.sh itself skips for: the version is built from
 * the source tarballs and their directory is absent (a bare clone without ../shared). A version
 * that could be built but was not is not a reason to skip: autoscalerBinaryPath() then throws
 * with the command to run, so the test fails.
 */
export function autoscalerUnavailableReason(version: string): string | undefined {
  assertKnownAutoscalerVersion(version);
  if (existsSync(autoscalerBinaryLocation(version))) return undefined;
  if (version === readToolVersions().CLUSTER_AUTOSCALER_VERSION) return undefined;
  const dir = autoscalerSourcesDir();
  if (!existsSync(dir)) {
    return (
      `cluster-autoscaler ${version} is built from source tarballs, and ${dir} is absent ` +
      '(a checkout without ../shared; set MCM_CA_SOURCES_DIR to build it)'
    );
  }
  const tarball = `cluster-autoscaler-${version}-externalgrpc-minsrc.tar.gz`;
  if (!existsSync(path.join(dir, tarball))) return `cluster-autoscaler ${version}: ${dir} has no ${tarball}`;
  return undefined;
}

/** Absolute path of a cluster-autoscaler binary; throws with the command that builds it when it is missing. */
export function autoscalerBinaryPath(version: string): string {
  assertKnownAutoscalerVersion(version);
  const p = autoscalerBinaryLocation(version);
  if (!existsSync(p)) {
    const reason = autoscalerUnavailableReason(version);
    throw new Error(
      reason ??
        `cluster-autoscaler ${version} is not built (expected ${p}); run \`bash hack/tools.sh ${autoscalerComponent(version)}\``,
    );
  }
  return p;
}

/**
 * The cluster-autoscaler's own externalgrpc.proto (of the module-proxy release; the source
 * tarballs carry no .proto files) with the Kubernetes .proto files it imports, as staged by
 * hack/tools.sh: load `file` with @grpc/proto-loader and `includeDirs: [includeDir]`. The RPCs,
 * their paths and every message except the template node and the pricing/options requests are
 * wire-identical in all pinned versions.
 */
export function autoscalerProto(): { includeDir: string; file: string } {
  const version = readToolVersions().CLUSTER_AUTOSCALER_VERSION;
  const includeDir = path.join(autoscalerDir(version), 'proto');
  const file = 'k8s.io/autoscaler/cluster-autoscaler/cloudprovider/externalgrpc/protos/externalgrpc.proto';
  if (!existsSync(path.join(includeDir, file))) {
    throw new Error(
      `the cluster-autoscaler ${version} protos are not staged (expected ${path.join(includeDir, file)}); ` +
        `run \`bash hack/tools.sh ${autoscalerComponent(version)}\``,
    );
  }
  return { includeDir, file };
}

// --- gardener MCM, the scale benchmark's anchor ------------------------------------------------------

/**
 * Directory of the anchor build (`bash hack/tools.sh mcm-anchor`): bin/machine-controller-manager
 * (gardener's, unchanged), bin/machine-controller (gardener's provider app with our virtual-cloud
 * driver, test/bench/anchor) and crds/ (gardener's CRDs of that release).
 */
export function mcmAnchorDir(): string {
  return path.join(toolsDir(), `mcm-anchor-${readToolVersions().MCM_ANCHOR_VERSION}`);
}

// --- moto, the EC2 emulator --------------------------------------------------------------------------

/** The emulator's start script (`bash hack/tools.sh moto`); throws with that command when missing. */
export function motoServerPath(): string {
  const p = path.join(toolsDir(), `moto-${readToolVersions().MOTO_VERSION}`, 'bin', 'moto_server');
  if (!existsSync(p)) {
    throw new Error(`the EC2 emulator is not installed (expected ${p}); run \`bash hack/tools.sh moto\``);
  }
  return p;
}

/**
 * cfn-lint, installed in the emulator's venv with moto (the CloudFormation templates in deploy/aws
 * are checked with it): the command and arguments that lint the given templates.
 */
export function cfnLintCommand(templates: string[]): { command: string; args: string[] } {
  const server = motoServerPath();
  return {
    command: path.join(path.dirname(server), '..', 'venv', 'bin', 'python'),
    args: ['-c', 'import sys; from cfnlint.runner import main; sys.exit(main())', ...templates],
  };
}

/** gardener's AWS machine-controller, unchanged (`bash hack/tools.sh mcm-aws-anchor`): bin/machine-controller. */
export function mcmAwsAnchorDir(): string {
  return path.join(toolsDir(), `mcm-aws-anchor-${readToolVersions().MCM_AWS_ANCHOR_VERSION}`);
}

// --- small Go modules of this repository built by hack/tools.sh ------------------------------------

/** Same hash as hack/tools.sh's *_source_hash: go.mod, go.sum and the .go files, in name order. */
function goModuleSourceHash(dir: string): string {
  const files = [
    'go.mod',
    'go.sum',
    ...readdirSync(dir)
      .filter((f) => f.endsWith('.go'))
      .sort(),
  ];
  const h = createHash('sha256');
  for (const f of files) h.update(readFileSync(path.join(dir, f)));
  return h.digest('hex').slice(0, 16);
}

/**
 * A binary hack/tools.sh builds from a Go module of this repository (component `name`, versioned by
 * the module's grpc-go, tied to its sources): its path, or why it cannot be used.
 */
function goModuleBinary(
  name: string,
  moduleDir: string,
  build: string,
): { path: string } | { missing: string } {
  const gomod = readFileSync(path.join(moduleDir, 'go.mod'), 'utf8');
  const grpc = /^\s*google\.golang\.org\/grpc (v\S+)/m.exec(gomod)?.[1] ?? 'unknown';
  const dir = path.join(toolsDir(), `${name}-grpc-${grpc}`);
  const bin = path.join(dir, 'bin', name);
  const rel = path.relative(repoRoot, moduleDir);
  if (!existsSync(bin)) return { missing: `${name} is not built (expected ${bin}); ${build}` };
  if (!existsSync(path.join(dir, 'source', goModuleSourceHash(moduleDir)))) {
    return { missing: `${name} at ${bin} is older than ${rel}; ${build}` };
  }
  return { path: bin };
}

/**
 * The Go floor of `npm run bench autoscaler` (test/bench/anchor/grpcfloor, built by `bash
 * hack/tools.sh autoscaler-floor`): its binary, or why it cannot be used (with the command to run).
 */
export function autoscalerFloorBinary(): { path: string } | { missing: string } {
  return goModuleBinary(
    'autoscaler-floor',
    path.join(repoRoot, 'test', 'bench', 'anchor', 'grpcfloor'),
    'run `bash hack/tools.sh autoscaler-floor` (about a minute) and run the benchmark again',
  );
}

/**
 * The gRPC edge conformance suite's Go side (test/grpc-edge: grpc-go clients and the stock grpc-go
 * server; `bash hack/tools.sh grpc-edge`, part of `npm run tools:test`).
 */
export function grpcEdgeBinary(): { path: string } | { missing: string } {
  return goModuleBinary(
    'grpc-edge',
    path.join(repoRoot, 'test', 'grpc-edge'),
    'run `bash hack/tools.sh grpc-edge` (or `npm run tools:test`)',
  );
}
