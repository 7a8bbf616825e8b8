// The install a platform team does: this project's chart and the official cluster-autoscaler chart
// (9.59.0, unmodified, from ../shared/third_party) rendered by the real helm with the two values
// files of deploy/cluster-autoscaler/, everything but the Deployments applied to a real
// kube-apiserver, and each Deployment's container run as a process the way a kubelet would run
// it: its rendered arguments and environment, its Secret and ConfigMap volumes written out as
// files (their mount paths kept below a scratch directory), its ServiceAccount's token. The
// autoscaler resolves the cloud-config's address through a hosts file that names only the
// rendered Services (cluster DNS), in a mount namespace of its own; a forwarder plays the
// Service. A wrong Service name, SAN, mount path or flag in either values file fails the test.

import { X509Certificate } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { loadYaml } from '@kubernetes/client-node';
import { expect } from 'chai';

import { kubeconfigYaml, startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { httpGetText } from '../harness/http.js';
import { ManagedProcess, freePort, waitUntil } from '../harness/process.js';
import { autoscalerBinaryPath, autoscalerVersions, repoRoot } from '../harness/tools.js';
import { CHART_DIR, Helm, parseManifests, run, type K8sDoc } from '../integration/env/chart.js';
import { until } from '../integration/env/until.js';

const CA_CHART = path.resolve(
  repoRoot,
  '..',
  'shared',
  'third_party',
  'cluster-autoscaler-chart',
  'cluster-autoscaler-chart-9.59.0.tgz',
);
const VALUES_DIR = path.join(repoRoot, 'deploy', 'cluster-autoscaler');
const MCM = { release: 'mcm', namespace: 'machine-system' };
const CA = { release: 'cluster-autoscaler', namespace: 'kube-system' };
/** The Service's address as the forwarder serves it (a loopback address of its own). */
const SERVICE_IP = '127.0.0.2';

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string } };
}
interface Container {
  name: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  ports?: { name?: string; containerPort: number }[];
  volumeMounts?: { name: string; mountPath: string }[];
}
interface KeyToPath {
  key: string;
  path: string;
}
interface Volume {
  name: string;
  secret?: { secretName: string; items?: KeyToPath[] };
  configMap?: { name: string; items?: KeyToPath[] };
  projected?: {
    sources: {
      secret?: { name: string; items?: KeyToPath[] };
      configMap?: { name: string; items?: KeyToPath[] };
    }[];
  };
  emptyDir?: unknown;
}
interface PodSpec {
  serviceAccountName: string;
  containers: Container[];
  volumes?: Volume[];
}
interface ServiceDoc extends K8sDoc {
  spec: { ports: { name?: string; port: number; targetPort?: number | string }[] };
}

const podSpecOf = (d: K8sDoc): PodSpec => (d.spec as { template: { spec: PodSpec } }).template.spec;

function only<T>(items: readonly T[], what: string): T {
  if (items.length !== 1) throw new Error(`expected one ${what}, found ${items.length}`);
  return items[0] as T;
}

/** The files of a Secret or ConfigMap (all keys, or the items asked for), decoded. */
function filesOf(
  docs: readonly K8sDoc[],
  kind: 'Secret' | 'ConfigMap',
  name: string,
  namespace: string,
  items: KeyToPath[] | undefined,
): Map<string, Buffer> {
  const d = docs.find(
    (x) => x.kind === kind && x.metadata.name === name && (x.metadata.namespace ?? namespace) === namespace,
  );
  if (d === undefined)
    throw new Error(`the volume's ${kind} ${namespace}/${name} is not rendered by either chart`);
  const data = new Map<string, Buffer>();
  const raw = d as unknown as { data?: Record<string, string>; stringData?: Record<string, string> };
  for (const [k, v] of Object.entries(raw.data ?? {}))
    data.set(k, kind === 'Secret' ? Buffer.from(v, 'base64') : Buffer.from(v));
  for (const [k, v] of Object.entries(raw.stringData ?? {})) data.set(k, Buffer.from(v));
  if (items === undefined) return data;
  const out = new Map<string, Buffer>();
  for (const i of items) {
    const v = data.get(i.key);
    if (v === undefined) throw new Error(`${kind} ${namespace}/${name} has no key ${i.key}`);
    out.set(i.path, v);
  }
  return out;
}

/**
 * Writes the container's Secret, ConfigMap and projected volumes below `root` as a kubelet mounts
 * them, and returns the mount paths it wrote (emptyDirs are left out: nothing names them).
 */
function mountVolumes(docs: readonly K8sDoc[], deployment: K8sDoc, c: Container, root: string): string[] {
  const ns = deployment.metadata.namespace ?? '';
  const spec = podSpecOf(deployment);
  const mounted: string[] = [];
  for (const m of c.volumeMounts ?? []) {
    const v = (spec.volumes ?? []).find((x) => x.name === m.name);
    if (v === undefined) throw new Error(`volumeMount ${m.name} names no volume`);
    const files = new Map<string, Buffer>();
    if (v.secret !== undefined)
      for (const [p, b] of filesOf(docs, 'Secret', v.secret.secretName, ns, v.secret.items)) files.set(p, b);
    if (v.configMap !== undefined)
      for (const [p, b] of filesOf(docs, 'ConfigMap', v.configMap.name, ns, v.configMap.items))
        files.set(p, b);
    for (const s of v.projected?.sources ?? []) {
      if (s.secret !== undefined)
        for (const [p, b] of filesOf(docs, 'Secret', s.secret.name, ns, s.secret.items)) files.set(p, b);
      if (s.configMap !== undefined)
        for (const [p, b] of filesOf(docs, 'ConfigMap', s.configMap.name, ns, s.configMap.items))
          files.set(p, b);
    }
    if (files.size === 0) continue;
    for (const [p, b] of files) {
      const file = path.join(root, m.mountPath, p);
      mkdirSync(path.dirname(file), { recursive: true });
      writeFileSync(file, b, { mode: 0o600 });
    }
    mounted.push(m.mountPath);
  }
  return mounted;
}

/** `text` with every mounted path moved below `root` (arguments, and files that name other mounts). */
function rebase(text: string, mounts: readonly string[], root: string): string {
  let out = text;
  for (const m of [...mounts].sort((a, b) => b.length - a.length))
    out = out.split(m).join(path.join(root, m));
  return out;
}

/** The container's environment with its fieldRefs resolved as the kubelet resolves them. */
function envOf(c: Container, deployment: K8sDoc, podName: string): Record<string, string> {
  const spec = podSpecOf(deployment);
  const fields: Record<string, string> = {
    'metadata.namespace': deployment.metadata.namespace ?? '',
    'metadata.name': podName,
    'spec.serviceAccountName': spec.serviceAccountName,
  };
  const env: Record<string, string> = {};
  for (const e of c.env ?? []) {
    const ref = e.valueFrom?.fieldRef?.fieldPath;
    if (ref !== undefined) {
      const v = fields[ref];
      if (v === undefined) throw new Error(`env ${e.name}: fieldRef ${ref} is not resolved by this test`);
      env[e.name] = v;
    } else env[e.name] = e.value ?? '';
  }
  return env;
}

/** The host and port of the externalgrpc cloud-config the autoscaler reads, and its file paths. */
function cloudConfigOf(file: string): {
  host: string;
  port: number;
  cert: string;
  key: string;
  cacert: string;
} {
  const cfg = loadYaml<Partial<Record<string, string>>>(readFileSync(file, 'utf8'));
  const m = /^(.+):(\d+)$/.exec(cfg.address ?? '');
  if (m === null) throw new Error(`cloud-config address ${cfg.address ?? '(none)'} is not HOST:PORT`);
  return {
    host: m[1] ?? '',
    port: Number(m[2]),
    cert: cfg.cert ?? '',
    key: cfg.key ?? '',
    cacert: cfg.cacert ?? '',
  };
}

/** What cluster DNS answers for the rendered Services: `<name>.<namespace>.svc[.cluster.local]`. */
function serviceNames(docs: readonly K8sDoc[]): Map<string, ServiceDoc> {
  const names = new Map<string, ServiceDoc>();
  for (const d of docs) {
    if (d.kind !== 'Service') continue;
    const base = `${d.metadata.name}.${d.metadata.namespace ?? ''}.svc`;
    names.set(base, d as ServiceDoc);
    names.set(`${base}.cluster.local`, d as ServiceDoc);
  }
  return names;
}

/**
 * Checks the autoscaler's address against what the charts render, as the cluster would: a Service
 * of that name and port, whose target port is the manager container's gRPC port, and a server
 * certificate valid for that host. Returns the container port the Service sends to.
 */
function resolveAddress(
  docs: readonly K8sDoc[],
  address: { host: string; port: number },
  manager: { deployment: K8sDoc; container: Container; serverCert: Buffer },
): number {
  const svc = serviceNames(docs).get(address.host);
  if (svc === undefined)
    throw new Error(
      `the autoscaler's address ${address.host}:${address.port} names no Service of either chart (they are: ${[...serviceNames(docs).keys()].filter((n) => !n.endsWith('.cluster.local')).join(', ')})`,
    );
  const port = svc.spec.ports.find((p) => p.port === address.port);
  if (port === undefined) throw new Error(`Service ${svc.metadata.name} has no port ${address.port}`);
  const selector = (svc.spec as { selector?: Record<string, string> }).selector ?? {};
  const podLabels =
    (manager.deployment.spec as { template: { metadata: { labels?: Record<string, string> } } }).template
      .metadata.labels ?? {};
  if (Object.entries(selector).some(([k, v]) => podLabels[k] !== v))
    throw new Error(`Service ${svc.metadata.name} does not select the manager's pods`);
  const target = port.targetPort ?? port.port;
  const containerPort =
    typeof target === 'number'
      ? target
      : manager.container.ports?.find((p) => p.name === target)?.containerPort;
  if (containerPort === undefined)
    throw new Error(`the manager container has no port named ${String(target)}`);
  const cert = new X509Certificate(manager.serverCert);
  if (cert.checkHost(address.host) === undefined)
    throw new Error(`the server certificate (${cert.subjectAltName ?? ''}) is not valid for ${address.host}`);
  return containerPort;
}

/** A TCP forwarder that plays a Service: SERVICE_IP:port to 127.0.0.1:target. */
async function forward(port: number, target: number): Promise<net.Server> {
  const server = net.createServer((c) => {
    const up = net.connect(target, '127.0.0.1');
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, SERVICE_IP, resolve);
  });
  return server;
}

describe('installed with the official cluster-autoscaler chart 9.59.0 and deploy/cluster-autoscaler/ (real helm, kube-apiserver, kube-scheduler, kube-controller-manager, kwok, cluster-autoscaler)', function () {
  this.timeout(300_000);
  let cp: ControlPlane;
  const helm = new Helm();
  const processes: ManagedProcess[] = [];
  let forwarder: net.Server | undefined;

  const render = async (
    chart: string,
    release: { release: string; namespace: string },
    valuesFile: string,
    extra: string[] = [],
  ): Promise<K8sDoc[]> => {
    const r = await helm.run([
      'template',
      release.release,
      chart,
      '--namespace',
      release.namespace,
      '-f',
      valuesFile,
      ...extra,
    ]);
    if (r.code !== 0) throw new Error(`helm template ${release.release} failed: ${r.stderr}`);
    return parseManifests(r.stdout).map((d) => ({
      ...d,
      metadata: { ...d.metadata, namespace: d.metadata.namespace ?? release.namespace },
    }));
  };
  // The machines are the built-in virtual cloud's, which registers their Nodes itself (on a real
  // cloud each VM's kubelet does): the one value the test adds to the documented ones.
  const renderBoth = async (caValues: string): Promise<{ mcm: K8sDoc[]; ca: K8sDoc[] }> => ({
    mcm: await render(CHART_DIR, MCM, path.join(VALUES_DIR, 'values-machine-controller-manager.yaml'), [
      '--include-crds',
      '--set',
      'rbac.virtualProvider=true',
    ]),
    ca: await render(CA_CHART, CA, caValues),
  });
  const deploymentOf = (docs: K8sDoc[]): K8sDoc =>
    only(
      docs.filter((d) => d.kind === 'Deployment'),
      'Deployment',
    );
  const serverCertOf = (docs: K8sDoc[]): Buffer =>
    filesOf(
      docs,
      'Secret',
      `${MCM.release}-machine-controller-manager-grpc-server-tls`,
      MCM.namespace,
      undefined,
    ).get('tls.crt') ?? Buffer.alloc(0);

  before(async () => {
    if (!existsSync(CA_CHART))
      throw new Error(
        `the official cluster-autoscaler chart is not at ${CA_CHART} (../shared/third_party beside the repository)`,
      );
    cp = await startControlPlane({ scheduler: true, controllerManager: true, kwok: true });
  });

  after(async () => {
    for (const p of processes.reverse()) await p.stop();
    forwarder?.close();
    await (cp as ControlPlane | undefined)?.stop();
  });

  it('a pending pod gets a node: the autoscaler of the official chart reaches the manager of ours through the Service, with the chart-issued client certificate, under each chart’s RBAC', async () => {
    const { mcm, ca } = await renderBoth(path.join(VALUES_DIR, 'values-cluster-autoscaler.yaml'));
    const work = path.join(cp.workDir, 'install');
    mkdirSync(work, { recursive: true });

    // Everything but the Deployments, as helm install would create it.
    const ns = await cp.kubectl(['create', 'namespace', MCM.namespace]);
    expect(ns.code, ns.stderr).to.equal(0);
    const objects = [...mcm, ...ca].filter((d) => d.kind !== 'Deployment');
    const applied = await cp.kubectl(['apply', '-f', '-'], {
      stdin: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }),
    });
    expect(applied.code, applied.stderr).to.equal(0);
    await until('the CRDs established', async () => {
      const r = await cp.kubectl(['get', 'machinedeployments.machine.sapcloud.io', '-A']);
      return r.code === 0;
    });

    /** A kubeconfig with the token of the Deployment's ServiceAccount (what the pod would mount). */
    const kubeconfigFor = async (deployment: K8sDoc, file: string): Promise<string> => {
      const sa = podSpecOf(deployment).serviceAccountName;
      const token = await cp.kubectl(['create', 'token', sa, '-n', deployment.metadata.namespace ?? '']);
      expect(token.code, token.stderr).to.equal(0);
      const caPem = readFileSync(path.join(cp.workDir, 'apiserver-certs', 'apiserver.crt'), 'utf8');
      writeFileSync(file, kubeconfigYaml(cp.server, caPem, token.stdout.trim()), { mode: 0o600 });
      return file;
    };

    // Our manager, as its Deployment runs it.
    const mcmDeployment = deploymentOf(mcm);
    const mcmContainer = only(podSpecOf(mcmDeployment).containers, 'manager container');
    const mcmRoot = path.join(work, 'mcm');
    const mcmMounts = mountVolumes(mcm, mcmDeployment, mcmContainer, mcmRoot);
    const metricsPort = await freePort();
    const grpcPort = await freePort();
    const mcmKubeconfig = await kubeconfigFor(mcmDeployment, path.join(work, 'mcm.kubeconfig'));
    let renderedGrpcPort: number | undefined;
    const mcmArgs = (mcmContainer.args ?? []).map((a) => {
      // The pod's network is its own: the listeners move to free loopback ports.
      if (a === '--control-kubeconfig=inClusterConfig') return `--control-kubeconfig=${mcmKubeconfig}`;
      if (a.startsWith('--address=')) return '--address=127.0.0.1';
      if (a.startsWith('--port=')) return `--port=${metricsPort}`;
      if (a.startsWith('--grpc-address=')) {
        renderedGrpcPort = Number(a.slice(a.lastIndexOf(':') + 1));
        return `--grpc-address=127.0.0.1:${grpcPort}`;
      }
      return rebase(a, mcmMounts, mcmRoot);
    });
    const manager = new ManagedProcess({
      name: 'manager',
      command: process.execPath,
      args: [path.join(repoRoot, 'dist', 'cmd', 'manager.js'), ...mcmArgs],
      logFile: path.join(cp.logDir, 'install-manager.log'),
      env: {
        ...process.env,
        ...envOf(mcmContainer, mcmDeployment, 'mcm-0'),
        KUBERNETES_SERVICE_HOST: '',
        KUBERNETES_SERVICE_PORT: '',
      },
    });
    processes.push(manager);
    manager.start();
    await waitUntil(
      'the manager ready',
      async () => (await httpGetText(`http://127.0.0.1:${metricsPort}/readyz`)).status === 200,
      { timeoutMs: 60_000, process: manager },
    );

    // The autoscaler, as the official chart's Deployment runs it.
    const caDeployment = deploymentOf(ca);
    const caContainer = only(podSpecOf(caDeployment).containers, 'autoscaler container');
    const image = (caContainer as unknown as { image: string }).image;
    const version = /:v(\d+\.\d+\.\d+)$/.exec(image)?.[1] ?? '';
    expect(autoscalerVersions(), `the image ${image} is a release the tests run`).to.include(version);
    const caRoot = path.join(work, 'ca');
    const caMounts = mountVolumes([...ca, ...mcm], caDeployment, caContainer, caRoot);
    for (const m of caMounts) {
      // Files that name other mounts (the cloud-config names the client certificate's).
      const dir = path.join(caRoot, m);
      for (const f of readdirSync(dir)) {
        const file = path.join(dir, f);
        writeFileSync(file, rebase(readFileSync(file, 'utf8'), caMounts, caRoot), { mode: 0o600 });
      }
    }
    const [entry, ...rest] = [...(caContainer.command ?? []), ...(caContainer.args ?? [])];
    expect(entry, 'the container runs the autoscaler binary').to.match(/cluster-autoscaler$/);
    const caArgs = rest.map((a) => rebase(a, caMounts, caRoot));
    const cloudConfigArg = caArgs.find((a) => a.startsWith('--cloud-config='));
    expect(cloudConfigArg, 'the autoscaler gets --cloud-config').to.not.equal(undefined);
    const cloudConfig = cloudConfigOf((cloudConfigArg ?? '').slice('--cloud-config='.length));

    // The cluster's part: the Service (DNS name, port, target port) and the certificate's name.
    const containerPort = resolveAddress([...mcm, ...ca], cloudConfig, {
      deployment: mcmDeployment,
      container: mcmContainer,
      serverCert: serverCertOf(mcm),
    });
    expect(containerPort, "the Service's target port is the port the manager serves gRPC on").to.equal(
      renderedGrpcPort,
    );
    forwarder = await forward(cloudConfig.port, grpcPort);
    const hosts = path.join(work, 'hosts');
    copyFileSync('/etc/hosts', hosts);
    writeFileSync(
      hosts,
      `${readFileSync(hosts, 'utf8')}\n${[...serviceNames([...mcm, ...ca]).keys()].map((n) => `${SERVICE_IP} ${n}`).join('\n')}\n`,
    );
    const healthPort = await freePort();
    const autoscaler = new ManagedProcess({
      name: 'cluster-autoscaler',
      command: 'unshare',
      args: [
        '--mount',
        'sh',
        '-c',
        `mount --bind ${hosts} /etc/hosts && exec "$0" "$@"`,
        autoscalerBinaryPath(version),
        ...caArgs,
        // What the pod has of its own: its network (the health port) and its ServiceAccount.
        `--address=127.0.0.1:${healthPort}`,
        `--kubeconfig=${await kubeconfigFor(caDeployment, path.join(work, 'ca.kubeconfig'))}`,
      ],
      logFile: path.join(cp.logDir, 'install-cluster-autoscaler.log'),
      env: {
        ...process.env,
        ...envOf(caContainer, caDeployment, 'cluster-autoscaler-0'),
        KUBERNETES_SERVICE_HOST: '',
        KUBERNETES_SERVICE_PORT: '',
        TZ: 'UTC',
      },
    });
    processes.push(autoscaler);
    autoscaler.start();
    await waitUntil(
      'the autoscaler healthy',
      async () => (await httpGetText(`http://127.0.0.1:${healthPort}/health-check`)).status === 200,
      { timeoutMs: 60_000, process: autoscaler },
    );

    // The node group the values name, empty, and a pod only a machine of it can take.
    await cp.applyYaml(
      [
        'apiVersion: machine.sapcloud.io/v1alpha1',
        'kind: MachineClass',
        'metadata: {name: workers}',
        'provider: virtual',
        'providerSpec: {}',
        'nodeTemplate:',
        '  capacity: {cpu: "2", memory: 4Gi, pods: "20"}',
        '  instanceType: v-medium',
        '  region: eu-virtual',
        '  zone: eu-virtual-a',
        '---',
        'apiVersion: machine.sapcloud.io/v1alpha1',
        'kind: MachineDeployment',
        'metadata: {name: workers}',
        'spec:',
        '  replicas: 0',
        '  selector: {matchLabels: {pool: workers}}',
        '  template:',
        '    metadata: {labels: {pool: workers}}',
        '    spec:',
        '      class: {kind: MachineClass, name: workers}',
        '      nodeTemplate: {metadata: {labels: {pool: workers}}}',
        '',
      ].join('\n'),
      MCM.namespace,
    );
    await cp.applyYaml(
      [
        'apiVersion: v1',
        'kind: Pod',
        'metadata: {name: app}',
        'spec:',
        '  terminationGracePeriodSeconds: 0',
        '  nodeSelector: {pool: workers}',
        '  containers: [{name: app, image: registry.invalid/app:1, resources: {requests: {cpu: 1500m}}}]',
        '',
      ].join('\n'),
      'default',
    );
    const t0 = Date.now();
    const node = await until(
      'the pod running on a new node of the group',
      async () => {
        const r = await cp.kubectl(['get', 'pod', 'app', '-n', 'default', '-o', 'json']);
        const pod = JSON.parse(r.stdout) as { spec: { nodeName?: string }; status: { phase?: string } };
        return pod.status.phase === 'Running' ? pod.spec.nodeName : undefined;
      },
      180_000,
    ).catch(async (err: unknown) => {
      // What the cluster looks like, for the failure message.
      const state = await cp.kubectl([
        'get',
        'machines,nodes,pods',
        '-A',
        '-o',
        'custom-columns=KIND:.kind,NAME:.metadata.name,PHASE:.status.currentStatus.phase,OP:.status.lastOperation.description,POD:.status.phase',
      ]);
      const pod = await cp.kubectl(['describe', 'pod', 'app', '-n', 'default']);
      const nodes = await cp.kubectl(['get', 'nodes', '-o', 'yaml']);
      throw new Error(
        `${err instanceof Error ? err.message : String(err)}\n${state.stdout}${state.stderr}\n${pod.stdout}\n${nodes.stdout}`,
        {
          cause: err,
        },
      );
    });
    console.log(
      `      scaled up and running ${((Date.now() - t0) / 1000).toFixed(1)} s after the pod was created`,
    );
    const md = await cp.kubectl(['get', 'machinedeployment', 'workers', '-n', MCM.namespace, '-o', 'json']);
    expect(
      (JSON.parse(md.stdout) as { spec: { replicas: number } }).spec.replicas,
      'raised by the autoscaler',
    ).to.equal(1);
    const machines = await cp.kubectl(['get', 'machines', '-n', MCM.namespace, '-o', 'json']);
    const nodes = (
      JSON.parse(machines.stdout) as { items: { metadata: { labels?: Record<string, string> } }[] }
    ).items.map((m) => m.metadata.labels?.node);
    expect(nodes, "the pod's node is a machine of the group").to.include(node);
    const log = readFileSync(path.join(cp.logDir, 'install-cluster-autoscaler.log'), 'utf8');
    expect(log, 'the autoscaler scaled the group the manager serves').to.include(
      `Scale-up: setting group ${MCM.namespace}/workers size to 1`,
    );
  });

  it('fails on a values file whose address names another Service than the one the manager’s chart creates', async () => {
    const wrong = path.join(cp.workDir, 'values-cluster-autoscaler.wrong.yaml');
    const good = readFileSync(path.join(VALUES_DIR, 'values-cluster-autoscaler.yaml'), 'utf8');
    // The name the docs used to give.
    const text = good.replace(
      'mcm-machine-controller-manager-grpc.machine-system.svc',
      'mcm.machine-system.svc',
    );
    expect(text, 'the values file names the Service').to.not.equal(good);
    writeFileSync(wrong, text);
    const { mcm, ca } = await renderBoth(wrong);
    const root = path.join(cp.workDir, 'wrong');
    const caDeployment = deploymentOf(ca);
    const caContainer = only(podSpecOf(caDeployment).containers, 'autoscaler container');
    const mounts = mountVolumes([...ca, ...mcm], caDeployment, caContainer, root);
    const arg = (caContainer.command ?? []).find((a) => a.startsWith('--cloud-config=')) ?? '';
    const cloudConfig = cloudConfigOf(rebase(arg.slice('--cloud-config='.length), mounts, root));
    const mcmDeployment = deploymentOf(mcm);
    expect(() =>
      resolveAddress([...mcm, ...ca], cloudConfig, {
        deployment: mcmDeployment,
        container: only(podSpecOf(mcmDeployment).containers, 'manager container'),
        serverCert: serverCertOf(mcm),
      }),
    ).to.throw(/names no Service of either chart/);
    // And no name the cluster's DNS would answer: the autoscaler could not connect.
    expect([...serviceNames([...mcm, ...ca]).keys()]).to.not.include(cloudConfig.host);
    const r = await run('getent', ['hosts', cloudConfig.host]);
    expect(r.code, `${cloudConfig.host} resolves on this machine`).to.not.equal(0);
  });
});
