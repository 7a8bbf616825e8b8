import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Repository root (this file is compiled to dist/test/harness/tools.js). */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

export interface ToolVersions {
  ETCD_VERSION: string;
  KUBERNETES_VERSION: string;
  KWOK_VERSION: string;
  HELM_VERSION: string;
  CLUSTER_AUTOSCALER_VERSION: string;
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
    KWOK_VERSION: get('KWOK_VERSION'),
    HELM_VERSION: get('HELM_VERSION'),
    CLUSTER_AUTOSCALER_VERSION: get('CLUSTER_AUTOSCALER_VERSION'),
  };
}

/** Same default as hack/tools.sh. */
export function toolsDir(): string {
  const env = process.env.MCM_TOOLS_DIR;
  if (env !== undefined && env !== '') return env;
  const cache = process.env.XDG_CACHE_HOME ?? path.join(homedir(), '.cache');
  return path.join(cache, 'mcm-ts', 'tools');
}

export type Binary =
  | 'etcd'
  | 'kube-apiserver'
  | 'kube-scheduler'
  | 'kube-controller-manager'
  | 'kubectl'
  | 'kwok'
  | 'helm'
  | 'cluster-autoscaler';

const component: Record<Binary, { dir: string; version: keyof ToolVersions }> = {
  etcd: { dir: 'etcd', version: 'ETCD_VERSION' },
  'kube-apiserver': { dir: 'kube', version: 'KUBERNETES_VERSION' },
  'kube-scheduler': { dir: 'kube', version: 'KUBERNETES_VERSION' },
  'kube-controller-manager': { dir: 'kube', version: 'KUBERNETES_VERSION' },
  kubectl: { dir: 'kube', version: 'KUBERNETES_VERSION' },
  kwok: { dir: 'kwok', version: 'KWOK_VERSION' },
  helm: { dir: 'helm', version: 'HELM_VERSION' },
  'cluster-autoscaler': { dir: 'cluster-autoscaler', version: 'CLUSTER_AUTOSCALER_VERSION' },
};

/** Directory of a component's build (bin/ and data such as kwok's stages/). */
export function componentDir(bin: Binary): string {
  const c = component[bin];
  return path.join(toolsDir(), `${c.dir}-${readToolVersions()[c.version]}`);
}

/** Absolute path of a built binary; throws with the command that builds it when it is missing. */
export function binaryPath(bin: Binary): string {
  const p = path.join(componentDir(bin), 'bin', bin);
  if (!existsSync(p)) {
    throw new Error(`${bin} is not built (expected ${p}); run \`npm run tools\` (hack/tools.sh) first`);
  }
  return p;
}
