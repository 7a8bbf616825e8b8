import { spawn } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { KubeConfig } from '@kubernetes/client-node';

import { allCRDs } from '../../lib/api/crds.js';
import { ManagedProcess, cancelRemoveOnExit, freePort, removeOnExit, waitUntil } from './process.js';
import { binaryPath, componentDir, kubernetesVersion } from './tools.js';

export interface ControlPlaneOptions {
  /** Install the machine.sapcloud.io CRDs and wait until they are established. */
  installCRDs?: boolean;
  /** Start kube-scheduler (needed for pods to be bound, e.g. by cluster-autoscaler scenarios). */
  scheduler?: boolean;
  /** Start kube-controller-manager (garbage collection, namespaces, node lifecycle, service accounts). */
  controllerManager?: boolean;
  /** Start kwok, which plays the kubelet for Nodes annotated kwok.x-k8s.io/node=fake. */
  kwok?: boolean;
  /** Extra kube-apiserver flags (`--name=value`). */
  apiServerFlags?: string[];
  /** Keep the working directory (logs, certificates) after stop(), for debugging. */
  keepWorkDir?: boolean;
  /**
   * Where the components write their logs (created when missing; left in place by stop()).
   * Default: the working directory, which stop() removes with everything else.
   */
  logDir?: string;
}

export interface KubectlResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** The components a running control plane can add (ControlPlane.addComponent). */
export type LateComponent = 'kube-scheduler' | 'kube-controller-manager' | 'kwok';

/** Annotation selecting the Nodes kwok manages. */
export const KWOK_NODE_ANNOTATION = 'kwok.x-k8s.io/node';
export const KWOK_NODE_ANNOTATION_VALUE = 'fake';

/** Nodes kwok manages (by annotation) in a harness control plane. */
export interface ControlPlane {
  /** Scratch directory (etcd data, certificates, kubeconfig); removed by stop() and at exit. */
  readonly workDir: string;
  /** Where the component logs are: logDir of the options, else workDir. */
  readonly logDir: string;
  readonly kubeconfigPath: string;
  readonly kubeConfig: KubeConfig;
  readonly server: string;
  readonly token: string;
  readonly etcdEndpoint: string;
  kubectl(args: string[], opts?: { stdin?: string; timeoutMs?: number }): Promise<KubectlResult>;
  applyYaml(yaml: string, namespace?: string): Promise<void>;
  /** Raw authenticated request to the apiserver; resolves with status and parsed JSON body. */
  request(method: string, urlPath: string, body?: unknown): Promise<{ status: number; body: unknown }>;
  /**
   * kube-apiserver's CPU profile over the next `seconds` (pprof's gzipped protobuf, as
   * `/debug/pprof/profile` serves it); the API server must run with `--profiling=true` (see
   * apiServerFlags). `userAgent` lets an audit-reading caller tell these requests apart.
   */
  apiServerCpuProfile(seconds: number, userAgent: string): Promise<Buffer>;
  /** Compacts etcd at its current revision, so watches from older resourceVersions get 410 Gone. */
  compactEtcd(): Promise<number>;
  stopApiServer(): Promise<void>;
  startApiServer(): Promise<void>;
  restartApiServer(): Promise<void>;
  /**
   * Starts a component the control plane was started without, and waits until it serves (dev
   * mode adds each as soon as its build finishes). Starting one that runs already is an error.
   */
  addComponent(component: LateComponent): Promise<void>;
  /** PIDs of every component process of this control plane that is running. */
  pids(): number[];
  stop(): Promise<void>;
}

interface Httpish {
  status: number;
  text: string;
}

function httpGet(url: string, opts: https.RequestOptions = {}): Promise<Httpish> {
  return new Promise((resolve, reject) => {
    const lib = url.startsWith('https:') ? https : http;
    const req = lib.request(url, { method: 'GET', timeout: 5000, ...opts }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, text });
      });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** A kubeconfig for `server` (its CA in PEM) with a bearer token. */
export function kubeconfigYaml(server: string, caPem: string, token: string): string {
  const ca = Buffer.from(caPem).toString('base64');
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: harness',
    '  cluster:',
    `    server: ${server}`,
    `    certificate-authority-data: ${ca}`,
    'users:',
    '- name: harness-admin',
    '  user:',
    `    token: ${token}`,
    'contexts:',
    '- name: harness',
    '  context:',
    '    cluster: harness',
    '    user: harness-admin',
    '    namespace: default',
    'current-context: harness',
    '',
  ].join('\n');
}

class HarnessControlPlane implements ControlPlane {
  readonly token = randomBytes(24).toString('hex');
  kubeconfigPath = '';
  kubeConfig = new KubeConfig();
  server = '';
  etcdEndpoint = '';
  private caPem = '';
  private apiPort = 0;
  private etcd: ManagedProcess | undefined;
  private apiServer: ManagedProcess | undefined;
  private others: ManagedProcess[] = [];
  private stopped = false;
  readonly logDir: string;

  constructor(
    readonly workDir: string,
    private readonly opts: ControlPlaneOptions,
  ) {
    this.logDir = opts.logDir ?? workDir;
    mkdirSync(this.logDir, { recursive: true });
  }

  async start(): Promise<void> {
    await this.startEtcd();
    await this.prepareApiServer();
    await this.startApiServer();
    this.caPem = readFileSync(path.join(this.workDir, 'apiserver-certs', 'apiserver.crt'), 'utf8');
    writeFileSync(this.kubeconfigPath, kubeconfigYaml(this.server, this.caPem, this.token), { mode: 0o600 });
    this.kubeConfig.loadFromFile(this.kubeconfigPath);
    const starts: Promise<void>[] = [];
    if (this.opts.controllerManager === true) starts.push(this.startControllerManager());
    if (this.opts.scheduler === true) starts.push(this.startScheduler());
    await Promise.all(starts);
    if (this.opts.kwok === true) await this.startKwok();
    if (this.opts.installCRDs === true) await this.installCRDs();
  }

  private async startEtcd(): Promise<void> {
    const [client, peer] = [await freePort(), await freePort()];
    this.etcdEndpoint = `http://127.0.0.1:${client}`;
    this.etcd = new ManagedProcess({
      name: 'etcd',
      command: binaryPath('etcd'),
      args: [
        `--data-dir=${path.join(this.workDir, 'etcd-data')}`,
        `--listen-client-urls=${this.etcdEndpoint}`,
        `--advertise-client-urls=${this.etcdEndpoint}`,
        `--listen-peer-urls=http://127.0.0.1:${peer}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
        `--initial-cluster=default=http://127.0.0.1:${peer}`,
        '--unsafe-no-fsync=true',
        '--log-level=warn',
      ],
      logFile: path.join(this.logDir, 'etcd.log'),
    });
    this.etcd.start();
    await waitUntil(
      'etcd',
      async () => {
        const r = await httpGet(`${this.etcdEndpoint}/health`);
        return r.status === 200 && r.text.includes('true');
      },
      { timeoutMs: 30_000, process: this.etcd },
    );
  }

  private async prepareApiServer(): Promise<void> {
    this.apiPort = await freePort();
    this.server = `https://127.0.0.1:${this.apiPort}`;
    this.kubeconfigPath = path.join(this.workDir, 'admin.kubeconfig');
    const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    writeFileSync(path.join(this.workDir, 'sa.pub'), publicKey.export({ type: 'spki', format: 'pem' }));
    writeFileSync(path.join(this.workDir, 'sa.key'), privateKey.export({ type: 'pkcs1', format: 'pem' }), {
      mode: 0o600,
    });
    writeFileSync(path.join(this.workDir, 'tokens.csv'), `${this.token},admin,admin-uid,"system:masters"\n`, {
      mode: 0o600,
    });
    const args = [
      `--etcd-servers=${this.etcdEndpoint}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${this.apiPort}`,
      '--advertise-address=127.0.0.1',
      // A loopback advertise address cannot be written to the "kubernetes" Endpoints.
      '--endpoint-reconciler-type=none',
      `--cert-dir=${path.join(this.workDir, 'apiserver-certs')}`,
      `--token-auth-file=${path.join(this.workDir, 'tokens.csv')}`,
      '--authorization-mode=Node,RBAC',
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-key-file=${path.join(this.workDir, 'sa.pub')}`,
      `--service-account-signing-key-file=${path.join(this.workDir, 'sa.key')}`,
      '--service-cluster-ip-range=10.0.0.0/24',
      '--allow-privileged=true',
      '--profiling=false',
      ...(this.opts.controllerManager === true ? [] : ['--disable-admission-plugins=ServiceAccount']),
      ...(this.opts.apiServerFlags ?? []),
    ];
    this.apiServer = new ManagedProcess({
      name: 'kube-apiserver',
      command: binaryPath('kube-apiserver'),
      args,
      logFile: path.join(this.logDir, 'kube-apiserver.log'),
    });
  }

  async startApiServer(): Promise<void> {
    const api = this.apiServer;
    if (api === undefined) throw new Error('control plane not prepared');
    // For the suite's summary line (test/summary-reporter.cjs): the release its control planes ran,
    // in this process's environment and, for a suite whose files run in worker processes (mocha's
    // parallel mode), in a file beside the results that the reporter reads at the end.
    const version = kubernetesVersion();
    process.env.MCM_CONTROL_PLANE_VERSION = version;
    const results = process.env.MCM_TEST_RESULTS;
    if (results !== undefined && results !== '')
      writeFileSync(`${results}.${process.env.MCM_TEST_SUITE ?? 'tests'}.kubernetes`, version);
    api.start();
    await waitUntil(
      'kube-apiserver',
      async () => {
        const certs = path.join(this.workDir, 'apiserver-certs', 'apiserver.crt');
        let ca: string;
        try {
          ca = readFileSync(certs, 'utf8');
        } catch {
          return false;
        }
        const r = await httpGet(`${this.server}/readyz`, {
          ca,
          headers: { Authorization: `Bearer ${this.token}` },
        });
        return r.status === 200;
      },
      { timeoutMs: 90_000, intervalMs: 250, process: api },
    );
  }

  async stopApiServer(): Promise<void> {
    await this.apiServer?.stop();
  }

  async restartApiServer(): Promise<void> {
    await this.stopApiServer();
    await this.startApiServer();
  }

  /** Starts a kube-* component that serves /healthz on a loopback port and waits for it. */
  private async startServingComponent(
    name: 'kube-controller-manager' | 'kube-scheduler',
    extraArgs: string[],
  ): Promise<void> {
    const port = await freePort();
    const proc = new ManagedProcess({
      name,
      command: binaryPath(name),
      args: [
        `--kubeconfig=${this.kubeconfigPath}`,
        `--authentication-kubeconfig=${this.kubeconfigPath}`,
        `--authorization-kubeconfig=${this.kubeconfigPath}`,
        '--bind-address=127.0.0.1',
        `--secure-port=${port}`,
        '--leader-elect=false',
        '--profiling=false',
        ...extraArgs,
      ],
      logFile: path.join(this.logDir, `${name}.log`),
    });
    this.others.push(proc);
    proc.start();
    await waitUntil(
      name,
      async () =>
        (await httpGet(`https://127.0.0.1:${port}/healthz`, { rejectUnauthorized: false })).status === 200,
      { timeoutMs: 60_000, process: proc },
    );
  }

  async addComponent(component: LateComponent): Promise<void> {
    if (this.others.some((p) => p.opts.name === component && p.running)) {
      throw new Error(`${component} runs already`);
    }
    if (component === 'kwok') await this.startKwok();
    else if (component === 'kube-scheduler') await this.startScheduler();
    else await this.startControllerManager();
  }

  private startControllerManager(): Promise<void> {
    return this.startServingComponent('kube-controller-manager', [
      `--service-account-private-key-file=${path.join(this.workDir, 'sa.key')}`,
      `--root-ca-file=${path.join(this.workDir, 'apiserver-certs', 'apiserver.crt')}`,
      '--use-service-account-credentials=false',
      '--node-monitor-period=2s',
      // kwok (as run here) renews no node Leases and refreshes node conditions only every ~10
      // minutes, so with a short grace period every kwok node would flip to Unknown and back.
      // Node readiness in this control plane is what the virtual provider (or a test) writes.
      '--node-monitor-grace-period=1h',
    ]);
  }

  private startScheduler(): Promise<void> {
    return this.startServingComponent('kube-scheduler', []);
  }

  private async startKwok(): Promise<void> {
    const stagesDir = path.join(componentDir('kwok'), 'stages');
    const stages = readdirSync(stagesDir)
      .filter((f) => f.endsWith('.yaml'))
      .map((f) => `--config=${path.join(stagesDir, f)}`);
    const kwok = new ManagedProcess({
      name: 'kwok',
      command: binaryPath('kwok'),
      args: [
        `--kubeconfig=${this.kubeconfigPath}`,
        '--manage-all-nodes=false',
        `--manage-nodes-with-annotation-selector=${KWOK_NODE_ANNOTATION}=${KWOK_NODE_ANNOTATION_VALUE}`,
        '--cidr=10.244.0.0/16',
        '--node-ip=10.240.0.1',
        ...stages,
      ],
      logFile: path.join(this.logDir, 'kwok.log'),
      // kwok reads the in-cluster variables when present; make sure it uses the kubeconfig.
      env: { ...process.env, KUBERNETES_SERVICE_HOST: '', KUBERNETES_SERVICE_PORT: '' },
    });
    this.others.push(kwok);
    kwok.start();
    // kwok has no readiness endpoint without its debug server; it is ready once it has
    // registered its informers, which it logs. Fail fast if it exits.
    await waitUntil(
      'kwok',
      () => {
        const log = kwok.tail(200);
        return Promise.resolve(log.includes('"msg":"Watch nodes"'));
      },
      { timeoutMs: 30_000, process: kwok },
    );
  }

  async installCRDs(): Promise<void> {
    for (const crd of allCRDs) {
      const r = await this.request('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd);
      if (r.status !== 201 && r.status !== 409) {
        throw new Error(`creating CRD ${crd.metadata.name}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
      }
    }
    for (const crd of allCRDs) {
      await waitUntil(
        `CRD ${crd.metadata.name} established`,
        async () => {
          const r = await this.request(
            'GET',
            `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`,
          );
          const conditions = (r.body as { status?: { conditions?: { type: string; status: string }[] } })
            .status?.conditions;
          return conditions?.some((c) => c.type === 'Established' && c.status === 'True') ?? false;
        },
        { timeoutMs: 30_000, intervalMs: 100 },
      );
    }
    // Discovery is served a moment after Established; kubectl relies on it.
    await waitUntil(
      'machine.sapcloud.io discovery',
      async () => (await this.request('GET', '/apis/machine.sapcloud.io/v1alpha1')).status === 200,
      { timeoutMs: 30_000, intervalMs: 100 },
    );
  }

  request(method: string, urlPath: string, body?: unknown): Promise<{ status: number; body: unknown }> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = https.request(
        `${this.server}${urlPath}`,
        {
          method,
          ca:
            this.caPem === ''
              ? readFileSync(path.join(this.workDir, 'apiserver-certs', 'apiserver.crt'))
              : this.caPem,
          headers: {
            Authorization: `Bearer ${this.token}`,
            Accept: 'application/json',
            ...(payload === undefined
              ? {}
              : {
                  'Content-Type': method === 'PATCH' ? 'application/merge-patch+json' : 'application/json',
                  'Content-Length': Buffer.byteLength(payload),
                }),
          },
          timeout: 30_000,
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (text += d));
          res.on('end', () => {
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              // not JSON; keep the text
            }
            resolve({ status: res.statusCode ?? 0, body: parsed });
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${method} ${urlPath}: timeout`)));
      req.on('error', reject);
      if (payload !== undefined) req.write(payload);
      req.end();
    });
  }

  kubectl(args: string[], opts: { stdin?: string; timeoutMs?: number } = {}): Promise<KubectlResult> {
    return new Promise((resolve, reject) => {
      const child = spawn(binaryPath('kubectl'), [`--kubeconfig=${this.kubeconfigPath}`, ...args], {
        stdio: ['pipe', 'pipe', 'pipe'],
        env: { ...process.env, KUBECONFIG: this.kubeconfigPath },
      });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
      child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
      const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
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

  async applyYaml(yaml: string, namespace?: string): Promise<void> {
    const args = ['apply', '--server-side', '--field-manager=harness', '-f', '-'];
    if (namespace !== undefined) args.push('-n', namespace);
    const r = await this.kubectl(args, { stdin: yaml });
    if (r.code !== 0) throw new Error(`kubectl apply failed (${r.code}): ${r.stderr}`);
  }

  async compactEtcd(): Promise<number> {
    const status = await new Promise<string>((resolve, reject) => {
      const req = http.request(`${this.etcdEndpoint}/v3/kv/range`, { method: 'POST' }, (res) => {
        let t = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (t += d));
        res.on('end', () => {
          resolve(t);
        });
      });
      req.on('error', reject);
      // Any key works: the response header carries the store's current revision.
      req.end(JSON.stringify({ key: Buffer.from('/').toString('base64') }));
    });
    const revision = Number((JSON.parse(status) as { header: { revision: string } }).header.revision);
    await new Promise<void>((resolve, reject) => {
      const req = http.request(`${this.etcdEndpoint}/v3/kv/compaction`, { method: 'POST' }, (res) => {
        res.resume();
        res.on('end', () => {
          if (res.statusCode === 200) resolve();
          else reject(new Error(`etcd compaction: HTTP ${res.statusCode ?? 0}`));
        });
      });
      req.on('error', reject);
      req.end(JSON.stringify({ revision: String(revision), physical: true }));
    });
    return revision;
  }

  apiServerCpuProfile(seconds: number, userAgent: string): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const req = https.request(
        `${this.server}/debug/pprof/profile?seconds=${seconds}`,
        {
          method: 'GET',
          ca:
            this.caPem === ''
              ? readFileSync(path.join(this.workDir, 'apiserver-certs', 'apiserver.crt'))
              : this.caPem,
          headers: { Authorization: `Bearer ${this.token}`, 'User-Agent': userAgent },
          timeout: (seconds + 30) * 1000,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (d: Buffer) => chunks.push(d));
          res.on('end', () => {
            const body = Buffer.concat(chunks);
            if (res.statusCode === 200) resolve(body);
            else reject(new Error(`kube-apiserver profile: HTTP ${res.statusCode ?? 0}: ${body.toString()}`));
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error('kube-apiserver profile: timeout')));
      req.on('error', reject);
      req.end();
    });
  }

  pids(): number[] {
    return [this.etcd, this.apiServer, ...this.others]
      .filter((p): p is ManagedProcess => p?.running === true)
      .map((p) => p.pid)
      .filter((p): p is number => p !== undefined);
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    // Reverse start order: clients first, then the apiserver, then etcd.
    await Promise.all(this.others.map((p) => p.stop(5000)));
    await this.apiServer?.stop(10_000);
    await this.etcd?.stop(5000);
    if (!keepWorkDir(this.opts)) {
      rmSync(this.workDir, { recursive: true, force: true });
      cancelRemoveOnExit(this.workDir);
    }
  }
}

function keepWorkDir(opts: ControlPlaneOptions): boolean {
  return opts.keepWorkDir === true || process.env.MCM_KEEP_TEST_ARTIFACTS === '1';
}

/**
 * Starts a real control plane on loopback: etcd, kube-apiserver, and optionally
 * kube-controller-manager, kube-scheduler and kwok. Always call stop(), also when a test fails;
 * if start-up fails, everything already started is stopped before the error is thrown. Should the
 * process exit without stop() (a signal, a crash), its processes are killed and its work
 * directory removed all the same (unless kept: keepWorkDir or MCM_KEEP_TEST_ARTIFACTS=1).
 */
export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const workDir = mkdtempSync(path.join(tmpdir(), 'mcm-cp-'));
  if (!keepWorkDir(opts)) removeOnExit(workDir);
  const cp = new HarnessControlPlane(workDir, opts);
  try {
    await cp.start();
  } catch (err) {
    await cp.stop();
    throw err;
  }
  return cp;
}
