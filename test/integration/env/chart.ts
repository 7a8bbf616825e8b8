import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { loadYaml } from '@kubernetes/client-node';

import { removeOnExit } from '../../harness/process.js';
import { binaryPath, repoRoot } from '../../harness/tools.js';

export const CHART_DIR = path.join(repoRoot, 'charts', 'machine-controller-manager');

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion (killed after timeoutMs) and collects its output. */
export function run(
  command: string,
  args: readonly string[],
  opts: { stdin?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; cwd?: string } = {},
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: opts.env ?? process.env,
      ...(opts.cwd === undefined ? {} : { cwd: opts.cwd }),
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, stdout, stderr });
    });
    // A command that exits without reading its input closes the pipe under our write (EPIPE):
    // its exit code and output are what count, not that error.
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.stdin ?? '');
  });
}

/**
 * Helm with its own cache/config/data directories, so tests never read or write ~/.config/helm;
 * they are removed when the test process exits.
 */
export class Helm {
  readonly bin = binaryPath('helm');
  private readonly home = mkdtempSync(path.join(tmpdir(), 'mcm-helm-'));

  constructor(private readonly kubeconfig?: string) {
    removeOnExit(this.home);
  }

  run(args: readonly string[], timeoutMs = 120_000): Promise<RunResult> {
    return run(this.bin, args, {
      timeoutMs,
      env: {
        ...process.env,
        HELM_CACHE_HOME: path.join(this.home, 'cache'),
        HELM_CONFIG_HOME: path.join(this.home, 'config'),
        HELM_DATA_HOME: path.join(this.home, 'data'),
        ...(this.kubeconfig === undefined ? {} : { KUBECONFIG: this.kubeconfig }),
      },
    });
  }

  /** `helm template` of the chart; throws with helm's message when rendering fails. */
  async template(release: string, namespace: string, setArgs: readonly string[] = []): Promise<string> {
    const r = await this.run(['template', release, CHART_DIR, '--namespace', namespace, ...setArgs]);
    if (r.code !== 0) throw new Error(`helm template failed (${r.code}): ${r.stderr}`);
    return r.stdout;
  }
}

export interface K8sDoc {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [key: string]: unknown;
}

/**
 * Parses a multi-document manifest stream into plain JSON objects. client-node's YAML loader
 * turns objects with a known apiVersion/kind into its typed models (renaming and dropping keys),
 * so the top-level apiVersion and kind lines are read separately and the body is loaded plain.
 */
export function parseManifests(text: string): K8sDoc[] {
  const docs: K8sDoc[] = [];
  for (const raw of text.split(/^---[^\n]*$/m)) {
    const top: Record<string, string> = {};
    const body = raw
      .split('\n')
      .filter((line) => {
        const m = /^(apiVersion|kind):\s*(\S+)\s*$/.exec(line);
        if (m?.[1] !== undefined && m[2] !== undefined) {
          top[m[1]] = m[2].replace(/^["']|["']$/g, '');
          return false;
        }
        return true;
      })
      .join('\n');
    const meaningful = body.split('\n').some((l) => l.trim() !== '' && !l.trim().startsWith('#'));
    if (top.kind === undefined && !meaningful) continue;
    const parsed = meaningful ? (JSON.parse(JSON.stringify(loadYaml(body))) as Record<string, unknown>) : {};
    docs.push({ ...parsed, ...top } as K8sDoc);
  }
  return docs;
}

export function findDoc(docs: readonly K8sDoc[], kind: string, nameSuffix = ''): K8sDoc {
  const d = docs.find((x) => x.kind === kind && x.metadata.name.endsWith(nameSuffix));
  if (d === undefined) {
    throw new Error(
      `no ${kind}${nameSuffix === '' ? '' : ` *${nameSuffix}`} among ${docs.map((x) => `${x.kind}/${x.metadata.name}`).join(', ')}`,
    );
  }
  return d;
}

/** Metric names a PromQL expression selects (`name{...}`), histogram suffixes removed. */
export function metricNamesIn(expr: string): string[] {
  const names = new Set<string>();
  for (const m of expr.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\{/g)) {
    const name = m[1];
    if (name === undefined || ['by', 'without', 'on', 'ignoring'].includes(name)) continue;
    names.add(name.replace(/_(bucket|sum|count)$/, ''));
  }
  return [...names];
}
