import { spawn, type ChildProcess } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import tls from 'node:tls';

import { credentials, status } from '@grpc/grpc-js';
import { expect } from 'chai';

import { allCRDs } from '../../lib/api/crds.js';
import { usage } from '../../lib/config.js';
import { startControlPlane, type ControlPlane } from '../harness/controlplane.js';
import { cloudProviderClient, grpcCode, type CloudProviderClient } from '../harness/grpcclient.js';
import { freePort } from '../harness/process.js';
import { binaryPath, repoRoot } from '../harness/tools.js';
import { CHART_DIR, Helm, findDoc, metricNamesIn, parseManifests, type K8sDoc } from './env/chart.js';
import { until } from './env/until.js';

const RELEASE = 'mcm';
const NS = 'mcm-system';
/** Full name the chart derives from the release name "mcm" (release name + chart name). */
const FULLNAME = 'mcm-machine-controller-manager';
const SA = `system:serviceaccount:${NS}:${FULLNAME}`;
const SA_GROUPS = ['system:serviceaccounts', `system:serviceaccounts:${NS}`, 'system:authenticated'];

/** Flags the chart sets from its own values; every other manager flag goes through values.flags. */
const CHART_MANAGED_FLAGS = [
  'control-kubeconfig',
  'target-kubeconfig',
  'namespace',
  'leader-elect',
  'leader-elect-resource-name',
  'leader-elect-lease-duration',
  'leader-elect-renew-deadline',
  'leader-elect-retry-period',
  'address',
  'port',
  'v',
  'log-format',
  'grpc-address',
  'grpc-tls-cert-file',
  'grpc-tls-key-file',
  'grpc-client-ca-file',
  'grpc-client-allowed-names',
  'grpc-insecure',
  'nodes',
  'aws-interruption-queue',
  'aws-instance-status-interval',
  'aws-impaired-timeout',
];
/** Chart-managed flags of the gRPC server (issue 9), which may not be in this build yet. */
/**
 * Flags the manager accepts but the chart pins: only 'leases' exists; the chart's Role grants
 * gardener's machine-controller Lease by its default name.
 */
const PINNED_FLAGS = ['leader-elect-resource-lock', 'machine-controller-lease-name'];

/** Flag names the manager's --help lists. */
function managerFlags(): string[] {
  return [...usage().matchAll(/^ {2}--([a-z0-9-]+)/gm)].map((m) => m[1] ?? '');
}

const managerHasGrpcServer = (): boolean => managerFlags().includes('grpc-address');

interface Container {
  args: string[];
  livenessProbe: { httpGet: { path: string; port: string } };
  readinessProbe: { httpGet: { path: string; port: string } };
  resources: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext: Record<string, unknown>;
  ports: { name: string; containerPort: number }[];
  volumeMounts: { name: string; mountPath: string }[];
}
interface ProjectedSecret {
  secret: { name: string; items: { key: string; path: string }[] };
}
interface PodSpec {
  securityContext: Record<string, unknown>;
  serviceAccountName: string;
  containers: Container[];
  volumes: {
    name: string;
    secret?: { secretName: string };
    projected?: { sources: ProjectedSecret[] };
  }[];
}
interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}
const podSpec = (d: K8sDoc): PodSpec => (d.spec as { template: { spec: PodSpec } }).template.spec;
/** The gRPC TLS volume's files: [Secret, key, path in the mount]. */
const grpcTlsFiles = (d: K8sDoc): [string, string, string][] =>
  (podSpec(d).volumes.find((v) => v.name === 'grpc-tls')?.projected?.sources ?? []).flatMap((s) =>
    s.secret.items.map((i): [string, string, string] => [s.secret.name, i.key, i.path]),
  );
const container = (d: K8sDoc): Container => {
  const c = podSpec(d).containers[0];
  if (c === undefined) throw new Error('Deployment has no container');
  return c;
};

function walkSchema(
  node: unknown,
  at: string,
  visit: (n: Record<string, unknown>, at: string) => void,
): void {
  if (node === null || typeof node !== 'object') return;
  const n = node as Record<string, unknown>;
  visit(n, at);
  for (const [k, v] of Object.entries((n.properties as Record<string, unknown> | undefined) ?? {}))
    walkSchema(v, `${at}.${k}`, visit);
  if (n.items !== undefined) walkSchema(n.items, `${at}[]`, visit);
  for (const alt of (n.anyOf as unknown[] | undefined) ?? []) walkSchema(alt, at, visit);
}

function httpGetText(url: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => {
          resolve({ status: res.statusCode ?? 0, text });
        });
      })
      .on('error', reject);
  });
}

describe('Helm chart charts/machine-controller-manager', function () {
  this.timeout(240_000);
  const helm = new Helm();

  describe('rendering (helm lint, helm template)', () => {
    it('passes helm lint --strict with the default values and with every optional part enabled', async () => {
      const plain = await helm.run(['lint', '--strict', CHART_DIR]);
      expect(plain.code, plain.stdout + plain.stderr).to.equal(0);
      const all = await helm.run([
        'lint',
        '--strict',
        CHART_DIR,
        '--set',
        'replicaCount=2,podDisruptionBudget.enabled=true,metrics.serviceMonitor.enabled=true,' +
          'metrics.prometheusRule.enabled=true,tls.certManager.enabled=true,' +
          'machineController.sidecar.enabled=true,machineController.sidecar.image=provider:v1,' +
          'workloadIdentity.enabled=true,' +
          'grpc.nodeGroups[0].name=workers,grpc.nodeGroups[0].min=1,grpc.nodeGroups[0].max=5',
      ]);
      expect(all.code, all.stdout + all.stderr).to.equal(0);
      for (const mode of ['none', 'kubeconfig']) {
        const r = await helm.run([
          'lint',
          '--strict',
          CHART_DIR,
          '--set',
          `targetCluster.mode=${mode},targetCluster.kubeconfigSecret.name=target,grpc.insecure=true`,
        ]);
        expect(r.code, `${mode}: ${r.stdout}${r.stderr}`).to.equal(0);
      }
    });

    it("carries package.json's version as its version and appVersion (the image tag it defaults to)", () => {
      const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as {
        version: string;
      };
      const chart = readFileSync(path.join(CHART_DIR, 'Chart.yaml'), 'utf8');
      expect(/^version: (\S+)$/m.exec(chart)?.[1]).to.equal(pkg.version);
      expect(/^appVersion: '?"?([^'"\s]+)/m.exec(chart)?.[1]).to.equal(pkg.version);
    });

    it('values.schema.json sets additionalProperties: false on every object it defines', () => {
      const schema: unknown = JSON.parse(readFileSync(path.join(CHART_DIR, 'values.schema.json'), 'utf8'));
      const open: string[] = [];
      let objects = 0;
      walkSchema(schema, 'values', (n, at) => {
        if (n.properties === undefined) return;
        objects++;
        if (n.additionalProperties !== false) open.push(at);
      });
      expect(objects).to.be.greaterThan(20);
      expect(open).to.deep.equal([]);
    });

    it('rejects unknown keys at every level and values of the wrong form', async () => {
      const cases: [string, RegExp][] = [
        ['replicas=2', /additional properties 'replicas' not allowed/i],
        ['grpc.tsl.enabled=true', /additional properties 'tsl' not allowed/i],
        ['tls.certManager.issuer=x', /additional properties 'issuer' not allowed/i],
        ['tls.allowedClientNames={cluster-*}', /does not match pattern/i],
        ['tls.allowedClientNames={a,,b}', /allowedClientNames/i],
        ['tls.clientCA.secret=x', /additional properties 'secret' not allowed/i],
        ['metrics.serviceMonitor.intervall=1m', /additional properties 'intervall' not allowed/i],
        [
          'grpc.nodeGroups[0].name=w,grpc.nodeGroups[0].min=1,grpc.nodeGroups[0].max=2,grpc.nodeGroups[0].size=3',
          /'size' not allowed/i,
        ],
        // The chart sets these itself; values.flags must not override them.
        ['flags.namespace=other', /additional properties 'namespace' not allowed/i],
        ['flags.machine-drain-timeout=2 hours', /does not match pattern/i],
        ['targetCluster.mode=remote', /targetCluster.mode/i],
        ['aws.interruptionQueue=mcm-interruptions', /does not match pattern/i],
        ['aws.impairedTimeout=5 minutes', /does not match pattern/i],
        ['aws.instanceStatusInterval=1min', /does not match pattern/i],
        ['image.pullPolicy=Sometimes', /pullPolicy/i],
      ];
      for (const [set, message] of cases) {
        const r = await helm.run(['template', RELEASE, CHART_DIR, '--set', set]);
        expect(r.code, `--set ${set} was accepted`).to.not.equal(0);
        expect(r.stderr, `--set ${set}`).to.match(message);
      }
      const ok = await helm.run([
        'template',
        RELEASE,
        CHART_DIR,
        '--set',
        'flags.machine-drain-timeout=1h30m,flags.safety-up=3,flags.max-unhealthy-replacements=10%',
        '--set',
        'aws.interruptionQueue=https://sqs.eu-west-1.amazonaws.com/123456789012/mcm-interruptions',
        // A string, as values.yaml holds it (a bare --set would make 0 a number).
        '--set-string',
        'aws.instanceStatusInterval=0,aws.impairedTimeout=10m',
      ]);
      expect(ok.code, ok.stderr).to.equal(0);
      const args = container(findDoc(parseManifests(ok.stdout), 'Deployment')).args;
      expect(args).to.include.members([
        '--machine-drain-timeout=1h30m',
        '--safety-up=3',
        '--max-unhealthy-replacements=10%',
        '--aws-interruption-queue=https://sqs.eu-west-1.amazonaws.com/123456789012/mcm-interruptions',
        '--aws-instance-status-interval=0',
        '--aws-impaired-timeout=10m',
      ]);
    });

    it('knows every manager flag: each is set by the chart or accepted in values.flags, and no other', () => {
      const known = managerFlags();
      expect(known.length).to.be.greaterThan(30);
      const schema = JSON.parse(readFileSync(path.join(CHART_DIR, 'values.schema.json'), 'utf8')) as {
        properties: { flags: { properties: Record<string, unknown> } };
      };
      const inValues = Object.keys(schema.properties.flags.properties);
      expect(
        inValues.filter((f) => !known.includes(f)),
        'values.flags names flags the manager lacks',
      ).to.deep.equal([]);
      expect(
        known.filter(
          (f) => !inValues.includes(f) && !CHART_MANAGED_FLAGS.includes(f) && !PINNED_FLAGS.includes(f),
        ),
        'manager flags the chart cannot set (add them to values.schema.json flags)',
      ).to.deep.equal([]);
      expect(
        CHART_MANAGED_FLAGS.filter((f) => !known.includes(f)),
        'the chart passes flags the manager does not have',
      ).to.deep.equal([]);
    });

    it('refuses more than one replica without leader election, saying what to change', async () => {
      const r = await helm.run([
        'template',
        RELEASE,
        CHART_DIR,
        '--set',
        'replicaCount=2,leaderElection.enabled=false',
      ]);
      expect(r.code).to.not.equal(0);
      expect(r.stderr).to.contain('more than one replica needs leader election');
      const one = await helm.run(['template', RELEASE, CHART_DIR, '--set', 'leaderElection.enabled=false']);
      expect(one.code, one.stderr).to.equal(0);
      const d = findDoc(parseManifests(one.stdout), 'Deployment');
      expect((d.spec as { strategy: { type: string } }).strategy.type).to.equal('Recreate');
      expect(container(d).args).to.include('--leader-elect=false');
    });

    it('mounts a projected ServiceAccount token for workload identity only when asked: read-only in the manager and the sidecar, with its audience and lifetime', async () => {
      const tokenVolume = (d: K8sDoc): unknown =>
        podSpec(d).volumes.find((v) => v.name === 'workload-identity');
      const plain = findDoc(parseManifests(await helm.template(RELEASE, NS, [])), 'Deployment');
      expect(tokenVolume(plain), 'no token by default').to.equal(undefined);
      const manifest = await helm.template(RELEASE, NS, [
        '--set',
        'workloadIdentity.enabled=true,workloadIdentity.audience=sts.example,workloadIdentity.expirationSeconds=7200,' +
          'machineController.sidecar.enabled=true,machineController.sidecar.image=provider:v1',
      ]);
      const d = findDoc(parseManifests(manifest), 'Deployment');
      expect(tokenVolume(d)).to.deep.include({
        projected: {
          // 0440 in the manifest: octal to the API server's YAML, decimal to the parser here.
          defaultMode: 440,
          sources: [
            { serviceAccountToken: { path: 'token', audience: 'sts.example', expirationSeconds: 7200 } },
          ],
        },
      });
      expect(manifest).to.match(/- name: workload-identity\n\s+projected:\n\s+defaultMode: 0440\n/);
      for (const c of podSpec(d).containers) {
        expect(c.volumeMounts).to.deep.include({
          name: 'workload-identity',
          mountPath: '/var/run/secrets/mcm/workload-identity',
          readOnly: true,
        });
      }
      const bad = await helm.run([
        'template',
        RELEASE,
        CHART_DIR,
        '--set',
        'workloadIdentity.enabled=true,workloadIdentity.mountPath=relative/dir',
      ]);
      expect(bad.code).to.not.equal(0);
      expect(bad.stderr).to.include('mountPath');
    });

    it('runs a gardener provider as a sidecar: the manager without the machine controller, the sidecar with its own flags and Lease, RBAC for both', async () => {
      const sidecar = [
        '--set',
        'machineController.sidecar.enabled=true,' +
          'machineController.sidecar.image=registry.example/machine-controller-manager-provider-aws:v0.28.0,' +
          'machineController.sidecar.args[0]=--machine-drain-timeout=2h,' +
          'targetCluster.mode=kubeconfig,targetCluster.kubeconfigSecret.name=target',
      ];
      const docs = parseManifests(await helm.template(RELEASE, NS, sidecar));
      const d = findDoc(docs, 'Deployment');
      const [ours, mc] = podSpec(d).containers as [Container, Container & { name: string; image: string }];
      expect(podSpec(d).containers).to.have.length(2);
      expect(ours.args).to.include('--controllers=machineset,machinedeployment,safety');
      expect(ours.args.filter((a) => a.startsWith('--grpc-address='))).to.have.length(1);
      expect(mc.name).to.equal('machine-controller');
      expect(mc.image).to.equal('registry.example/machine-controller-manager-provider-aws:v0.28.0');
      expect(mc.args).to.include.members([
        '--control-kubeconfig=inClusterConfig',
        '--target-kubeconfig=/etc/mcm/target/kubeconfig',
        `--namespace=${NS}`,
        '--leader-elect=true',
        '--port=10259',
        '--machine-drain-timeout=2h',
      ]);
      // gardener's provider app has no --leader-elect-resource-name: its Lease is "machine-controller".
      expect(mc.args.some((a) => a.startsWith('--leader-elect-resource-name'))).to.equal(false);
      expect(mc.volumeMounts.map((m) => m.name)).to.include('target-kubeconfig');
      expect(mc.securityContext).to.deep.include({ readOnlyRootFilesystem: true, runAsNonRoot: true });
      const role = findDoc(docs, 'Role', FULLNAME);
      const rules = role.rules as (Rule & { resourceNames?: string[] })[];
      expect(rules).to.deep.include({
        apiGroups: ['machine.sapcloud.io'],
        resources: ['machines', 'machines/status', 'machineclasses'],
        verbs: ['update'],
      });
      expect(rules).to.deep.include({
        apiGroups: ['coordination.k8s.io'],
        resources: ['leases'],
        resourceNames: ['machine-controller'],
        verbs: ['get', 'update'],
      });
      // Without the sidecar none of that is granted and the manager runs every controller.
      const plain = parseManifests(await helm.template(RELEASE, NS));
      expect(
        container(findDoc(plain, 'Deployment')).args.some((a) => a.startsWith('--controllers')),
      ).to.equal(false);
      const plainRules = findDoc(plain, 'Role', FULLNAME).rules as Rule[];
      expect(
        plainRules.filter((r) => r.resources.includes('machines') && r.verbs.includes('update')),
      ).to.deep.equal([]);
      // Running the machine controller itself, its leader holds gardener's machine-controller
      // Lease beside its own (so a gardener machine-controller left beside it waits).
      expect(plainRules).to.deep.include({
        apiGroups: ['coordination.k8s.io'],
        resources: ['leases'],
        resourceNames: ['machine-controller-manager', 'machine-controller'],
        verbs: ['get', 'update'],
      });
      for (const [set, message] of [
        ['machineController.sidecar.enabled=true', 'needs machineController.sidecar.image'],
        [
          'machineController.sidecar.enabled=true,machineController.sidecar.image=x,flags.controllers=machine',
          'drop flags.controllers',
        ],
        [
          'machineController.sidecar.enabled=true,machineController.sidecar.image=x,leaderElection.resourceName=machine-controller',
          'the Lease gardener',
        ],
        [
          'machineController.sidecar.enabled=true,machineController.sidecar.image=x,machineController.sidecar.port=10258',
          'give them different ports',
        ],
      ] as const) {
        const r = await helm.run(['template', RELEASE, CHART_DIR, '--set', set]);
        expect(r.code, set).to.not.equal(0);
        expect(r.stderr, set).to.contain(message);
      }
    });

    it('ships exactly the CRDs that lib/api generates', async () => {
      // What helm install applies: each file of crds/ (`helm show crds` joins them without separators).
      const r = await helm.run(['template', RELEASE, CHART_DIR, '--include-crds']);
      expect(r.code, r.stderr).to.equal(0);
      const shipped = parseManifests(r.stdout)
        .filter((d) => d.kind === 'CustomResourceDefinition')
        .map((d) => JSON.parse(JSON.stringify(d)) as K8sDoc)
        .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
      const generated = allCRDs
        .map((c) => JSON.parse(JSON.stringify(c)) as K8sDoc)
        .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
      expect(shipped.map((d) => d.metadata.name)).to.deep.equal(generated.map((d) => d.metadata.name));
      expect(shipped).to.deep.equal(generated);
    });

    it('renders a locked-down Deployment: probes on the metrics port, resources, non-root, read-only, no capabilities, mTLS', async () => {
      const docs = parseManifests(await helm.template(RELEASE, NS));
      const d = findDoc(docs, 'Deployment');
      const c = container(d);
      expect(c.livenessProbe.httpGet).to.deep.equal({ path: '/healthz', port: 'metrics' });
      expect(c.readinessProbe.httpGet).to.deep.equal({ path: '/readyz', port: 'metrics' });
      expect(c.ports).to.deep.include({ name: 'metrics', containerPort: 10258, protocol: 'TCP' });
      expect(c.ports).to.deep.include({ name: 'grpc', containerPort: 8086, protocol: 'TCP' });
      expect(c.resources.requests).to.have.keys('cpu', 'memory');
      expect(c.resources.limits).to.have.key('memory');
      expect(c.securityContext).to.deep.include({
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        runAsNonRoot: true,
      });
      expect(c.securityContext.capabilities).to.deep.equal({ drop: ['ALL'] });
      expect(c.securityContext.seccompProfile).to.deep.equal({ type: 'RuntimeDefault' });
      const pod = podSpec(d);
      expect(pod.securityContext).to.deep.include({ runAsNonRoot: true, runAsUser: 1000 });
      expect(pod.securityContext.seccompProfile).to.deep.equal({ type: 'RuntimeDefault' });
      expect(pod.serviceAccountName).to.equal(FULLNAME);
      expect(c.args).to.include.members([
        '--control-kubeconfig=inClusterConfig',
        `--namespace=${NS}`,
        '--leader-elect=true',
        '--port=10258',
        '--grpc-address=0.0.0.0:8086',
        '--grpc-tls-cert-file=/etc/mcm/grpc-tls/tls.crt',
        '--grpc-tls-key-file=/etc/mcm/grpc-tls/tls.key',
        '--grpc-client-ca-file=/etc/mcm/grpc-tls/client-ca.crt',
        '--grpc-client-allowed-names=cluster-autoscaler',
      ]);
      expect(c.args).to.not.include('--grpc-insecure');
      expect(c.volumeMounts.map((m) => m.mountPath)).to.include.members(['/tmp', '/etc/mcm/grpc-tls']);
      // One projected volume (one atomic swap on renewal); the client CA is the chart's own, and no
      // CA key is mounted.
      expect(grpcTlsFiles(d)).to.deep.equal([
        [`${FULLNAME}-grpc-server-tls`, 'tls.crt', 'tls.crt'],
        [`${FULLNAME}-grpc-server-tls`, 'tls.key', 'tls.key'],
        [`${FULLNAME}-grpc-client-ca`, 'tls.crt', 'client-ca.crt'],
      ]);
      const grpcSvc = findDoc(docs, 'Service', '-grpc');
      expect((grpcSvc.spec as { ports: { port: number }[] }).ports[0]?.port).to.equal(8086);
      const metricsSvc = findDoc(docs, 'Service', '-metrics');
      expect((metricsSvc.spec as { ports: { port: number }[] }).ports[0]?.port).to.equal(10258);

      const groups = await helm.template(RELEASE, NS, [
        '--set',
        'grpc.nodeGroups[0].name=workers,grpc.nodeGroups[0].min=1,grpc.nodeGroups[0].max=5,' +
          'grpc.nodeGroups[1].name=gpu,grpc.nodeGroups[1].namespace=other,grpc.nodeGroups[1].min=0,grpc.nodeGroups[1].max=2',
      ]);
      expect(container(findDoc(parseManifests(groups), 'Deployment')).args).to.include.members([
        `--nodes=1:5:${NS}.workers`,
        '--nodes=0:2:other.gpu',
      ]);
      const insecure = await helm.template(RELEASE, NS, ['--set', 'grpc.insecure=true']);
      const insecureDocs = parseManifests(insecure);
      expect(container(findDoc(insecureDocs, 'Deployment')).args).to.include('--grpc-insecure');
      expect(insecureDocs.filter((x) => x.kind === 'Secret')).to.deep.equal([]);
    });

    it('renders the RBAC each target mode and feature needs, and no more', async () => {
      const rules = (docs: K8sDoc[], kind: string, suffix = ''): Rule[] =>
        (findDoc(docs, kind, suffix) as unknown as { rules: Rule[] }).rules;
      const verbsOf = (rs: Rule[], resource: string): string[] =>
        rs.filter((r) => r.resources.includes(resource)).flatMap((r) => r.verbs);

      // Defaults: no virtual provider (no Node creation), bootstrap tokens narrowed by the policy.
      const control = parseManifests(await helm.template(RELEASE, NS));
      expect(verbsOf(rules(control, 'ClusterRole', '-target'), 'nodes')).to.not.include('create');
      expect(verbsOf(rules(control, 'Role', '-bootstrap-tokens'), 'secrets')).to.have.members([
        'get',
        'create',
        'delete',
      ]);
      expect(verbsOf(rules(control, 'Role', FULLNAME), 'configmaps')).to.deep.equal([]);
      const policy = findDoc(control, 'ValidatingAdmissionPolicy', '-bootstrap-tokens');
      expect(JSON.stringify(policy.spec)).to.contain(`system:serviceaccount:${NS}:${FULLNAME}`);
      expect(findDoc(control, 'ValidatingAdmissionPolicyBinding', '-bootstrap-tokens').spec).to.deep.include({
        policyName: `${FULLNAME}-bootstrap-tokens`,
        validationActions: ['Deny'],
      });

      const virtual = parseManifests(
        await helm.template(RELEASE, NS, ['--set', 'rbac.virtualProvider=true']),
      );
      expect(verbsOf(rules(virtual, 'ClusterRole', '-target'), 'nodes')).to.include('create');

      const noTokens = parseManifests(
        await helm.template(RELEASE, NS, ['--set', 'rbac.bootstrapTokens=false']),
      );
      expect(noTokens.filter((d) => d.metadata.name.endsWith('-bootstrap-tokens'))).to.deep.equal([]);
      const noPolicy = parseManifests(
        await helm.template(RELEASE, NS, ['--set', 'rbac.bootstrapTokenPolicy=false']),
      );
      expect(noPolicy.filter((d) => d.kind.startsWith('ValidatingAdmissionPolicy'))).to.deep.equal([]);
      expect(findDoc(noPolicy, 'Role', '-bootstrap-tokens').kind).to.equal('Role');

      const none = parseManifests(await helm.template(RELEASE, NS, ['--set', 'targetCluster.mode=none']));
      expect(
        none.filter(
          (d) =>
            d.kind === 'ClusterRole' || d.kind === 'ClusterRoleBinding' || d.kind.startsWith('Validating'),
        ),
      ).to.deep.equal([]);
      expect(verbsOf(rules(none, 'Role', FULLNAME), 'configmaps')).to.deep.equal([]);
      const noneVirtual = parseManifests(
        await helm.template(RELEASE, NS, ['--set', 'targetCluster.mode=none,rbac.virtualProvider=true']),
      );
      expect(verbsOf(rules(noneVirtual, 'Role', FULLNAME), 'configmaps')).to.have.members([
        'get',
        'list',
        'watch',
        'create',
        'delete',
      ]);
      expect(container(findDoc(none, 'Deployment')).args).to.include('--target-kubeconfig=none');

      const remote = parseManifests(
        await helm.template(RELEASE, NS, [
          '--set',
          'targetCluster.mode=kubeconfig,targetCluster.kubeconfigSecret.name=target,targetCluster.kubeconfigSecret.key=kc',
        ]),
      );
      expect(remote.filter((d) => d.kind === 'ClusterRole')).to.deep.equal([]);
      const d = findDoc(remote, 'Deployment');
      expect(container(d).args).to.include('--target-kubeconfig=/etc/mcm/target/kc');
      expect(podSpec(d).volumes.find((v) => v.name === 'target-kubeconfig')?.secret?.secretName).to.equal(
        'target',
      );
      const missing = await helm.run([
        'template',
        RELEASE,
        CHART_DIR,
        '--set',
        'targetCluster.mode=kubeconfig',
      ]);
      expect(missing.code).to.not.equal(0);
      expect(missing.stderr).to.contain('targetCluster.kubeconfigSecret.name is empty');
    });

    it('takes the gRPC certificates from cert-manager or from a named Secret when asked, each with its client CA and allowed names', async () => {
      const cm = parseManifests(await helm.template(RELEASE, NS, ['--set', 'tls.certManager.enabled=true']));
      expect(cm.filter((d) => d.kind === 'Secret')).to.deep.equal([]);
      const server = findDoc(cm, 'Certificate', '-grpc-server-tls');
      const spec = server.spec as { dnsNames: string[]; usages: string[]; issuerRef: { name: string } };
      expect(spec.dnsNames).to.include(`${FULLNAME}-grpc.${NS}.svc`);
      expect(spec.usages).to.deep.equal(['server auth']);
      expect(spec.issuerRef.name).to.equal(`${FULLNAME}-grpc-ca`);
      const client = findDoc(cm, 'Certificate', '-autoscaler-client-tls');
      const clientSpec = client.spec as { usages: string[]; commonName: string; issuerRef: { name: string } };
      expect(clientSpec.usages).to.deep.equal(['client auth']);
      expect(clientSpec.commonName).to.equal('cluster-autoscaler');
      // The client certificate comes from a CA of its own, not from the server's.
      expect(clientSpec.issuerRef.name).to.equal(`${FULLNAME}-grpc-client-ca`);
      expect((findDoc(cm, 'Certificate', '-grpc-client-ca').spec as { isCA: boolean }).isCA).to.equal(true);
      expect(cm.filter((d) => d.kind === 'Issuer').map((d) => d.metadata.name)).to.have.members([
        `${FULLNAME}-selfsigned`,
        `${FULLNAME}-grpc-ca`,
        `${FULLNAME}-grpc-client-ca`,
      ]);
      const cmDeployment = findDoc(cm, 'Deployment');
      expect(grpcTlsFiles(cmDeployment)).to.deep.include([
        `${FULLNAME}-grpc-client-ca`,
        'tls.crt',
        'client-ca.crt',
      ]);
      expect(container(cmDeployment).args).to.include('--grpc-client-allowed-names=cluster-autoscaler');

      // Your issuer signs both, and its CA verifies clients (as before); the name still narrows it.
      const corp = parseManifests(
        await helm.template(RELEASE, NS, [
          '--set',
          'tls.certManager.enabled=true,tls.certManager.issuerRef.name=corp,tls.certManager.issuerRef.kind=ClusterIssuer',
        ]),
      );
      expect(
        (findDoc(corp, 'Certificate', '-autoscaler-client-tls').spec as { issuerRef: { name: string } })
          .issuerRef.name,
      ).to.equal('corp');
      expect(corp.filter((d) => d.kind === 'Issuer')).to.deep.equal([]);
      expect(grpcTlsFiles(findDoc(corp, 'Deployment'))).to.deep.include([
        `${FULLNAME}-grpc-server-tls`,
        'ca.crt',
        'client-ca.crt',
      ]);
      expect(container(findDoc(corp, 'Deployment')).args).to.include(
        '--grpc-client-allowed-names=cluster-autoscaler',
      );

      // Your Secret: its ca.crt verifies clients and any name passes, as before...
      const own = parseManifests(
        await helm.template(RELEASE, NS, ['--set', 'tls.existingSecret=my-grpc-tls']),
      );
      expect(own.filter((d) => d.kind === 'Secret' || d.kind === 'Certificate')).to.deep.equal([]);
      expect(grpcTlsFiles(findDoc(own, 'Deployment'))).to.deep.equal([
        ['my-grpc-tls', 'tls.crt', 'tls.crt'],
        ['my-grpc-tls', 'tls.key', 'tls.key'],
        ['my-grpc-tls', 'ca.crt', 'client-ca.crt'],
      ]);
      expect(
        container(findDoc(own, 'Deployment')).args.filter((a) => a.includes('allowed-names')),
      ).to.deep.equal([]);
      // ...unless you name the client CA and the allowed names.
      const ownNarrowed = parseManifests(
        await helm.template(RELEASE, NS, [
          '--set',
          'tls.existingSecret=my-grpc-tls,tls.clientCA.existingSecret=autoscaler-ca,tls.clientCA.key=bundle.pem,' +
            'tls.allowedClientNames={cluster-autoscaler,ca.kube-system.svc}',
        ]),
      );
      expect(grpcTlsFiles(findDoc(ownNarrowed, 'Deployment'))).to.deep.include([
        'autoscaler-ca',
        'bundle.pem',
        'client-ca.crt',
      ]);
      expect(container(findDoc(ownNarrowed, 'Deployment')).args).to.include(
        '--grpc-client-allowed-names=cluster-autoscaler,ca.kube-system.svc',
      );
      const stray = await helm.run([
        'template',
        RELEASE,
        CHART_DIR,
        '--set',
        'tls.clientCA.existingSecret=x',
      ]);
      expect(stray.code).to.not.equal(0);
      expect(stray.stderr).to.contain('tls.clientCA.existingSecret is set without tls.existingSecret');
    });

    it('alerts and dashboard use only metrics of the manager and name the conditions worth paging for', async () => {
      const docs = parseManifests(
        await helm.template(RELEASE, NS, ['--set', 'metrics.prometheusRule.enabled=true']),
      );
      const rule = findDoc(docs, 'PrometheusRule');
      const rules = (rule.spec as { groups: { rules: { alert: string; expr: string }[] }[] }).groups.flatMap(
        (g) => g.rules,
      );
      expect(rules.map((r) => r.alert)).to.include.members([
        'MCMMachineNotRunning',
        'MCMDrainBlocked',
        'MCMMachineControllerFrozen',
        'MCMMachineSetOvershootFrozen',
        'MCMAutoscalerGRPCErrors',
      ]);
      const byAlert = new Map(rules.map((r) => [r.alert, r.expr]));
      expect(byAlert.get('MCMDrainBlocked')).to.contain('mcm_machine_drain_blocking_pods');
      expect(byAlert.get('MCMMachineControllerFrozen')).to.contain('mcm_machine_controller_frozen');
      for (const r of rules) expect(r.expr, r.alert).to.contain(`job="${FULLNAME}-metrics"`);
      const cmap = findDoc(docs, 'ConfigMap', '-dashboard');
      const dash = JSON.parse(
        (cmap.data as Record<string, string>)['machine-controller-manager.json'] ?? '',
      ) as {
        panels: { targets?: { expr: string }[] }[];
      };
      const exprs = dash.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
      expect(exprs.length).to.be.greaterThan(20);
      // The metric names are checked against a running manager's /metrics in the install test.
      const used = new Set([...rules.map((r) => r.expr), ...exprs].flatMap(metricNamesIn));
      expect([...used]).to.include.members([
        'mcm_machine_current_status_phase',
        'controller_runtime_reconcile_total',
      ]);
    });
  });

  describe('against a real kube-apiserver', () => {
    let cp: ControlPlane;
    let helmK: Helm;
    let work: string;

    before(async function () {
      this.timeout(180_000);
      cp = await startControlPlane({ installCRDs: true });
      helmK = new Helm(cp.kubeconfigPath);
      work = mkdtempSync(path.join(tmpdir(), 'mcm-chart-'));
    });

    after(async () => {
      await (cp as ControlPlane | undefined)?.stop();
      if ((work as string | undefined) !== undefined) rmSync(work, { recursive: true, force: true });
    });

    async function kubectl(
      args: string[],
      stdin?: string,
    ): Promise<{ code: number; stdout: string; stderr: string }> {
      return cp.kubectl(args, stdin === undefined ? {} : { stdin });
    }

    it('helm template | kubectl apply --dry-run=server accepts every object', async () => {
      expect((await kubectl(['create', 'namespace', 'dry-run'])).code).to.equal(0);
      const variants: string[][] = [
        [],
        ['--set', 'targetCluster.mode=none,grpc.insecure=true'],
        [
          '--set',
          'targetCluster.mode=kubeconfig,targetCluster.kubeconfigSecret.name=target,replicaCount=3,' +
            'podDisruptionBudget.enabled=true,podDisruptionBudget.maxUnavailable=null,podDisruptionBudget.minAvailable=2,' +
            'controlNamespace=default,tls.clientSecret.namespace=kube-system,' +
            'grpc.nodeGroups[0].name=workers,grpc.nodeGroups[0].min=1,grpc.nodeGroups[0].max=5',
        ],
        [
          '--set',
          'machineController.sidecar.enabled=true,' +
            'machineController.sidecar.image=registry.example/machine-controller-manager-provider-aws:v0.28.0,' +
            'machineController.sidecar.env[0].name=AWS_ENDPOINT_URL_EC2,' +
            'machineController.sidecar.env[0].value=http://ec2.internal:5000,workloadIdentity.enabled=true',
        ],
      ];
      for (const v of variants) {
        const manifest = await helm.template(RELEASE, 'dry-run', v);
        const kinds = parseManifests(manifest).map((d) => d.kind);
        const r = await kubectl(['apply', '--dry-run=server', '-f', '-'], manifest);
        expect(r.code, `${v.join(' ')}: ${r.stderr}`).to.equal(0);
        // One line per object: "<kind>/<name> created (server dry run)".
        expect(r.stdout.trim().split('\n')).to.have.length(kinds.length);
        expect(r.stdout).to.not.contain('unchanged');
      }
    });

    it('helm install creates every object of the release, and helm upgrade keeps the generated certificates', async () => {
      const install = await helmK.run([
        'install',
        RELEASE,
        CHART_DIR,
        '--namespace',
        NS,
        '--create-namespace',
        '--set',
        // The manager test below runs machines of the built-in virtual provider.
        'rbac.virtualProvider=true,' +
          'grpc.nodeGroups[0].name=workers,grpc.nodeGroups[0].min=1,grpc.nodeGroups[0].max=4',
      ]);
      expect(install.code, install.stderr).to.equal(0);
      const manifest = await helmK.run(['get', 'manifest', RELEASE, '--namespace', NS]);
      expect(manifest.code, manifest.stderr).to.equal(0);
      const docs = parseManifests(manifest.stdout);
      expect(docs.map((d) => d.kind)).to.include.members([
        'ServiceAccount',
        'Secret',
        'ConfigMap',
        'Role',
        'RoleBinding',
        'ClusterRole',
        'ClusterRoleBinding',
        'ValidatingAdmissionPolicy',
        'ValidatingAdmissionPolicyBinding',
        'Service',
        'Deployment',
      ]);
      for (const d of docs) {
        const ns = d.metadata.namespace;
        const group = d.apiVersion.includes('/') ? d.apiVersion.split('/')[0] : undefined;
        const type = (group === undefined ? d.kind : `${d.kind}.${group}`).toLowerCase();
        const r = await kubectl([
          'get',
          type,
          d.metadata.name,
          ...(ns === undefined ? [] : ['-n', ns]),
          '-o',
          'name',
        ]);
        expect(r.code, `${d.kind} ${ns ?? ''}/${d.metadata.name}: ${r.stderr}`).to.equal(0);
      }
      for (const crd of allCRDs) {
        expect((await kubectl(['get', 'crd', crd.metadata.name])).code).to.equal(0);
      }
      const secretData = async (name: string): Promise<Record<string, string>> => {
        const r = await kubectl(['get', 'secret', name, '-n', NS, '-o', 'json']);
        expect(r.code, r.stderr).to.equal(0);
        return (JSON.parse(r.stdout) as { data: Record<string, string> }).data;
      };
      const before = await secretData(`${FULLNAME}-grpc-server-tls`);
      const clientCABefore = await secretData(`${FULLNAME}-grpc-client-ca`);
      const clientBefore = await secretData(`${FULLNAME}-autoscaler-client-tls`);
      const upgrade = async (): Promise<void> => {
        const r = await helmK.run([
          'upgrade',
          RELEASE,
          CHART_DIR,
          '--namespace',
          NS,
          '--reuse-values',
          '--set',
          'logging.verbosity=3',
        ]);
        expect(r.code, r.stderr).to.equal(0);
      };
      await upgrade();
      expect(await secretData(`${FULLNAME}-grpc-server-tls`)).to.deep.equal(before);
      expect(await secretData(`${FULLNAME}-grpc-client-ca`)).to.deep.equal(clientCABefore);
      expect(await secretData(`${FULLNAME}-autoscaler-client-tls`)).to.deep.equal(clientBefore);

      // A client Secret from before the separate client CA (no record of the CA that issued it) is
      // issued again, from the client CA; the server's certificates stay.
      const unmark = await kubectl([
        'annotate',
        'secret',
        `${FULLNAME}-autoscaler-client-tls`,
        '-n',
        NS,
        'mcm-ts.io/client-ca-sha256-',
      ]);
      expect(unmark.code, unmark.stderr).to.equal(0);
      await upgrade();
      const reissued = await secretData(`${FULLNAME}-autoscaler-client-tls`);
      expect(reissued['tls.crt']).to.not.equal(clientBefore['tls.crt']);
      expect(reissued['ca.crt']).to.equal(before['ca.crt']);
      const pemOf = (b64: string | undefined): string => Buffer.from(b64 ?? '', 'base64').toString();
      expect(
        new X509Certificate(pemOf(reissued['tls.crt'])).verify(
          new X509Certificate(pemOf(clientCABefore['tls.crt'])).publicKey,
        ),
      ).to.equal(true);
      expect(await secretData(`${FULLNAME}-grpc-server-tls`)).to.deep.equal(before);
    });

    it('helm install with a gardener provider sidecar: two containers, and RBAC for what the sidecar writes and its Lease', async () => {
      const ns = 'mcm-sidecar';
      const release = 'mcs';
      const full = `${release}-machine-controller-manager`;
      const install = await helmK.run([
        'install',
        release,
        CHART_DIR,
        '--namespace',
        ns,
        '--create-namespace',
        '--set',
        'machineController.sidecar.enabled=true,' +
          'machineController.sidecar.image=registry.example/machine-controller-manager-provider-aws:v0.28.0',
      ]);
      expect(install.code, install.stderr).to.equal(0);
      try {
        const dep = await kubectl(['get', 'deployment', full, '-n', ns, '-o', 'json']);
        expect(dep.code, dep.stderr).to.equal(0);
        const names = (
          JSON.parse(dep.stdout) as { spec: { template: { spec: { containers: { name: string }[] } } } }
        ).spec.template.spec.containers.map((c) => c.name);
        expect(names).to.deep.equal(['machine-controller-manager', 'machine-controller']);
        const sa = `system:serviceaccount:${ns}:${full}`;
        const can = async (...args: string[]): Promise<string> =>
          (
            await kubectl([
              'auth',
              'can-i',
              ...args,
              `--as=${sa}`,
              '--as-group=system:serviceaccounts',
              `--as-group=system:serviceaccounts:${ns}`,
              '--as-group=system:authenticated',
            ])
          ).stdout.trim();
        expect(await can('update', 'machines.machine.sapcloud.io', '-n', ns)).to.equal('yes');
        expect(
          await can('update', 'machines.machine.sapcloud.io', '-n', ns, '--subresource=status'),
        ).to.equal('yes');
        expect(await can('update', 'leases.coordination.k8s.io/machine-controller', '-n', ns)).to.equal(
          'yes',
        );
        expect(await can('update', 'leases.coordination.k8s.io/someone-else', '-n', ns)).to.equal('no');
        expect(await can('update', 'nodes')).to.equal('yes');
      } finally {
        const r = await helmK.run(['uninstall', release, '--namespace', ns, '--wait']);
        expect(r.code, r.stderr).to.equal(0);
      }
    });

    it('prints the cluster-autoscaler cloud-config and flags in NOTES.txt', async () => {
      const r = await helmK.run(['get', 'notes', RELEASE, '--namespace', NS]);
      expect(r.code, r.stderr).to.equal(0);
      const notes = r.stdout;
      expect(notes).to.contain(`address: "${FULLNAME}-grpc.${NS}.svc:8086"`);
      expect(notes).to.contain('cert: "/etc/mcm-client-tls/tls.crt"');
      expect(notes).to.contain('key: "/etc/mcm-client-tls/tls.key"');
      expect(notes).to.contain('cacert: "/etc/mcm-client-tls/ca.crt"');
      expect(notes).to.contain('--cloud-provider=externalgrpc');
      expect(notes).to.contain('--cloud-config=');
      expect(notes).to.contain(`${NS}/${FULLNAME}-autoscaler-client-tls`);
    });
    it('the generated certificates do mTLS for the Service name with a client CA of their own: the client certificate passes, none or one from the server CA is refused', async () => {
      const read = async (name: string): Promise<Record<string, string>> => {
        const r = await kubectl(['get', 'secret', name, '-n', NS, '-o', 'json']);
        const data = (JSON.parse(r.stdout) as { data: Record<string, string> }).data;
        return Object.fromEntries(
          Object.entries(data).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]),
        );
      };
      const server = await read(`${FULLNAME}-grpc-server-tls`);
      const client = await read(`${FULLNAME}-autoscaler-client-tls`);
      const clientCAPem = (await read(`${FULLNAME}-grpc-client-ca`))['tls.crt'] ?? '';
      const ca = new X509Certificate(server['ca.crt'] ?? '');
      const clientCA = new X509Certificate(clientCAPem);
      const serverCert = new X509Certificate(server['tls.crt'] ?? '');
      const clientCert = new X509Certificate(client['tls.crt'] ?? '');
      expect(serverCert.verify(ca.publicKey)).to.equal(true);
      expect(serverCert.subjectAltName).to.contain(`DNS:${FULLNAME}-grpc.${NS}.svc`);
      expect(clientCA.fingerprint256).to.not.equal(ca.fingerprint256);
      expect(clientCert.verify(clientCA.publicKey)).to.equal(true);
      expect(clientCert.verify(ca.publicKey)).to.equal(false);
      expect(clientCert.subject).to.equal('CN=cluster-autoscaler');
      // The autoscaler verifies the server with the client Secret's ca.crt.
      expect(client['ca.crt']).to.equal(server['ca.crt']);

      // A TLS server set up as the Deployment sets up the manager (client CA = the chart's own).
      const srv = tls.createServer(
        {
          cert: server['tls.crt'],
          key: server['tls.key'],
          ca: clientCAPem,
          requestCert: true,
          rejectUnauthorized: true,
        },
        (socket) => {
          socket.end('hello');
        },
      );
      await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
      const port = (srv.address() as { port: number }).port;
      const connect = (id: { cert?: string | undefined; key?: string | undefined }): Promise<string> =>
        new Promise((resolve, reject) => {
          const s = tls.connect({
            host: '127.0.0.1',
            port,
            servername: `${FULLNAME}-grpc.${NS}.svc`,
            ca: client['ca.crt'],
            ...id,
          });
          let got = '';
          s.setEncoding('utf8');
          s.on('data', (d: string) => (got += d));
          s.on('end', () => {
            resolve(got);
          });
          s.on('error', reject);
        });
      const refused = async (id: {
        cert?: string | undefined;
        key?: string | undefined;
      }): Promise<boolean> => {
        try {
          return (await connect(id)) !== 'hello';
        } catch {
          return true;
        }
      };
      try {
        expect(await connect({ cert: client['tls.crt'], key: client['tls.key'] })).to.equal('hello');
        expect(await refused({}), 'a client without a certificate got through').to.equal(true);
        // The server certificate (from the server CA, with clientAuth usage) as a client certificate.
        expect(
          await refused({ cert: server['tls.crt'], key: server['tls.key'] }),
          'a certificate of the server CA got through',
        ).to.equal(true);
      } finally {
        srv.close();
      }
    });

    it('RBAC lets the ServiceAccount do what the manager does and refuses the rest (kubectl auth can-i)', async () => {
      const canI = async (verb: string, resource: string, ns?: string, sub?: string): Promise<boolean> => {
        const args = [
          'auth',
          'can-i',
          verb,
          resource,
          `--as=${SA}`,
          ...SA_GROUPS.map((g) => `--as-group=${g}`),
        ];
        if (ns === undefined) args.push('--all-namespaces');
        else args.push('-n', ns);
        if (sub !== undefined) args.push(`--subresource=${sub}`);
        const r = await kubectl(args);
        if (r.code !== 0 && r.code !== 1)
          throw new Error(`kubectl auth can-i ${args.join(' ')}: ${r.stderr}`);
        return r.stdout.trim() === 'yes';
      };
      const M = (r: string): string => `${r}.machine.sapcloud.io`;
      // [verb, resource, namespace (undefined: cluster-wide), subresource]: what lib/ does, per caller.
      const allowed: [string, string, string | undefined, string?][] = [
        // informers (list/watch) and live reads of the machine objects in the control namespace
        ...['machines', 'machinesets', 'machinedeployments', 'machineclasses'].flatMap((r) =>
          ['get', 'list', 'watch'].map((v): [string, string, string] => [v, M(r), NS]),
        ),
        ['create', M('machines'), NS], // MachineSet controller
        ['patch', M('machines'), NS], // labels, annotations, finalizers, owner references
        ['delete', M('machines'), NS], // MachineSet scale-down, node controller
        ['patch', M('machines'), NS, 'status'], // machine controller
        ['create', M('machinesets'), NS], // MachineDeployment controller
        ['update', M('machinesets'), NS], // scaling a set
        ['patch', M('machinesets'), NS], // overshoot freeze label, finalizers, adoption
        ['delete', M('machinesets'), NS], // old sets
        ['update', M('machinesets'), NS, 'status'],
        ['patch', M('machinesets'), NS, 'status'],
        ['update', M('machinedeployments'), NS], // rollback
        ['patch', M('machinedeployments'), NS], // annotations, finalizers
        ['update', M('machinedeployments'), NS, 'status'],
        ['patch', M('machinedeployments'), NS, 'status'],
        ['update', M('machinesets'), NS, 'finalizers'], // blockOwnerDeletion
        ['update', M('machinedeployments'), NS, 'finalizers'],
        ['patch', M('machineclasses'), NS], // finalizer
        ['list', 'secrets', NS],
        ['watch', 'secrets', NS],
        ['patch', 'secrets', NS], // finalizer
        ['create', 'events', NS],
        ['patch', 'events', NS],
        ['create', 'leases.coordination.k8s.io', NS],
        ['get', 'leases.coordination.k8s.io/machine-controller-manager', NS],
        ['update', 'leases.coordination.k8s.io/machine-controller-manager', NS],
        ['get', 'leases.coordination.k8s.io/machine-controller', NS], // gardener's, held beside
        ['update', 'leases.coordination.k8s.io/machine-controller', NS],
        // target cluster
        ['list', 'nodes', undefined],
        ['watch', 'nodes', undefined],
        ['get', 'nodes', undefined],
        ['patch', 'nodes', undefined],
        ['patch', 'nodes', undefined, 'status'],
        ['delete', 'nodes', undefined],
        ['create', 'nodes', undefined], // virtual provider: a VM is a Node
        ['list', 'pods', undefined],
        ['watch', 'pods', undefined],
        ['delete', 'pods', 'default'], // forced drain
        ['create', 'pods', 'default', 'eviction'],
        ['list', 'poddisruptionbudgets.policy', undefined],
        ['watch', 'poddisruptionbudgets.policy', undefined],
        ['list', 'persistentvolumeclaims', undefined],
        ['list', 'persistentvolumes', undefined],
        ['list', 'volumeattachments.storage.k8s.io', undefined],
        ['delete', 'volumeattachments.storage.k8s.io', undefined],
        ['get', 'secrets', 'kube-system'], // bootstrap tokens
        ['create', 'secrets', 'kube-system'],
        ['delete', 'secrets', 'kube-system'],
      ];
      const refused: [string, string, string | undefined, string?][] = [
        ['delete', 'secrets', NS],
        ['create', 'secrets', NS],
        ['update', 'secrets', NS],
        ['list', 'secrets', 'default'],
        ['list', 'secrets', 'kube-system'],
        ['list', M('machines'), 'default'],
        ['create', M('machinedeployments'), NS],
        ['delete', M('machinedeployments'), NS],
        ['create', M('machineclasses'), NS],
        ['delete', M('machineclasses'), NS],
        ['update', M('machineclasses'), NS],
        ['update', M('machines'), NS],
        ['get', 'configmaps', NS],
        ['update', 'leases.coordination.k8s.io/someone-else', NS],
        ['delete', 'leases.coordination.k8s.io', NS],
        ['update', 'nodes', undefined],
        ['create', 'pods', 'default'],
        ['patch', 'pods', 'default'],
        ['create', 'persistentvolumes', undefined],
        ['delete', 'persistentvolumeclaims', 'default'],
        ['create', 'volumeattachments.storage.k8s.io', undefined],
        ['create', 'clusterrolebindings.rbac.authorization.k8s.io', undefined],
        ['escalate', 'roles.rbac.authorization.k8s.io', NS],
        ['impersonate', 'serviceaccounts', NS],
        ['create', 'customresourcedefinitions.apiextensions.k8s.io', undefined],
      ];
      const wrong: string[] = [];
      for (const [verb, res, ns, sub] of allowed) {
        if (!(await canI(verb, res, ns, sub)))
          wrong.push(`refused: ${verb} ${res}${sub ? `/${sub}` : ''} in ${ns ?? '*'}`);
      }
      for (const [verb, res, ns, sub] of refused) {
        if (await canI(verb, res, ns, sub))
          wrong.push(`allowed: ${verb} ${res}${sub ? `/${sub}` : ''} in ${ns ?? '*'}`);
      }
      expect(wrong).to.deep.equal([]);
    });

    it('the admission policy lets the ServiceAccount create and delete only bootstrap token Secrets in kube-system', async () => {
      const as = [`--as=${SA}`, ...SA_GROUPS.map((g) => `--as-group=${g}`)];
      const secret = (name: string, type: string): string =>
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: { name, namespace: 'kube-system' },
          type,
          stringData: { 'token-id': 'abc123', 'token-secret': '0123456789abcdef' },
        });
      const other = await kubectl([
        'create',
        'secret',
        'generic',
        'mcm-other',
        '-n',
        'kube-system',
        '--from-literal=k=v',
      ]);
      expect(other.code, other.stderr).to.equal(0);
      try {
        // RBAC alone allows each of these; the policy refuses them.
        for (const [what, args, stdin] of [
          ['create an Opaque Secret', ['create', '-f', '-'], secret('bootstrap-token-abc124', 'Opaque')],
          [
            'create a token Secret of another name',
            ['create', '-f', '-'],
            secret('not-a-token', 'bootstrap.kubernetes.io/token'),
          ],
          ['delete another Secret', ['delete', 'secret', 'mcm-other', '-n', 'kube-system'], undefined],
        ] as [string, string[], string | undefined][]) {
          const r = await kubectl([...args, ...as], stdin);
          expect(r.code, `${what} was allowed`).to.not.equal(0);
          expect(r.stderr, what).to.contain('may only write and delete bootstrap token Secrets');
        }
        // What the manager does with a machine's token.
        const name = 'bootstrap-token-abc123';
        const created = await kubectl(
          ['create', '-f', '-', ...as],
          secret(name, 'bootstrap.kubernetes.io/token'),
        );
        expect(created.code, created.stderr).to.equal(0);
        const read = await kubectl(['get', 'secret', name, '-n', 'kube-system', '-o', 'name', ...as]);
        expect(read.code, read.stderr).to.equal(0);
        const deleted = await kubectl(['delete', 'secret', name, '-n', 'kube-system', ...as]);
        expect(deleted.code, deleted.stderr).to.equal(0);
        expect((await kubectl(['get', 'secret', 'mcm-other', '-n', 'kube-system'])).code).to.equal(0);
      } finally {
        await kubectl(['delete', 'secret', 'mcm-other', '-n', 'kube-system', '--ignore-not-found']);
      }
    });

    it('the manager runs as the ServiceAccount with the rendered flags: machines become Running and are deleted, nothing is forbidden', async () => {
      const token = await kubectl(['create', 'token', FULLNAME, '-n', NS, '--duration=1h']);
      expect(token.code, token.stderr).to.equal(0);
      const cluster = cp.kubeConfig.getCurrentCluster();
      if (cluster === null) throw new Error('no cluster in the harness kubeconfig');
      const caPem = readFileSync(path.join(cp.workDir, 'apiserver-certs', 'apiserver.crt'));
      const kubeconfig = path.join(work, 'sa.kubeconfig');
      writeFileSync(
        kubeconfig,
        [
          'apiVersion: v1',
          'kind: Config',
          'clusters:',
          '- name: c',
          '  cluster:',
          `    server: ${cluster.server}`,
          `    certificate-authority-data: ${caPem.toString('base64')}`,
          'users:',
          '- name: sa',
          '  user:',
          `    token: ${token.stdout.trim()}`,
          'contexts:',
          '- name: sa',
          '  context: {cluster: c, user: sa}',
          'current-context: sa',
          '',
        ].join('\n'),
        { mode: 0o600 },
      );
      const manifest = await helmK.run(['get', 'manifest', RELEASE, '--namespace', NS]);
      const deployment = findDoc(parseManifests(manifest.stdout), 'Deployment');
      expect(
        managerHasGrpcServer(),
        'the manager lists --grpc-address: its gRPC server is checked below',
      ).to.equal(true);
      const metricsPort = await freePort();
      const grpcPort = await freePort();

      // The files of the Deployment's projected gRPC TLS volume, as the kubelet would mount them.
      for (const [secret, key, file] of grpcTlsFiles(deployment)) {
        const r = await kubectl(['get', 'secret', secret, '-n', NS, '-o', 'json']);
        expect(r.code, r.stderr).to.equal(0);
        const data = (JSON.parse(r.stdout) as { data: Record<string, string> }).data;
        writeFileSync(path.join(work, file), Buffer.from(data[key] ?? '', 'base64'));
      }

      const args = container(deployment).args.flatMap((a): string[] => {
        if (a.startsWith('--control-kubeconfig=')) return [`--control-kubeconfig=${kubeconfig}`];
        if (a.startsWith('--address=')) return ['--address=127.0.0.1'];
        if (a.startsWith('--port=')) return [`--port=${metricsPort}`];
        if (a.startsWith('--grpc-address=')) return [`--grpc-address=127.0.0.1:${grpcPort}`];
        if (a.startsWith('--grpc-') && a.includes('/etc/mcm/grpc-tls/'))
          return [a.replace('/etc/mcm/grpc-tls', work)];
        return [a];
      });
      expect(args).to.include(`--namespace=${NS}`);
      expect(args).to.include('--leader-elect=true');

      let log = '';
      let stopTokenWatch = (): boolean => true;
      const child: ChildProcess = spawn(
        process.execPath,
        [path.join(repoRoot, 'dist', 'cmd', 'manager.js'), ...args],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
          env: { ...process.env, KUBERNETES_SERVICE_HOST: '', KUBERNETES_SERVICE_PORT: '' },
        },
      );
      child.stdout?.setEncoding('utf8').on('data', (d: string) => (log += d));
      child.stderr?.setEncoding('utf8').on('data', (d: string) => (log += d));
      const exited = new Promise<number>((resolve) =>
        child.on('exit', (code) => {
          resolve(code ?? -1);
        }),
      );
      try {
        await until(
          'manager ready',
          async () => (await httpGetText(`http://127.0.0.1:${metricsPort}/readyz`)).status === 200,
          60_000,
        );
        // The user data asks for a bootstrap token, so each machine's token Secret is created in
        // kube-system and deleted once its node joined, under the chart's Role and admission policy.
        const tokens = spawn(
          binaryPath('kubectl'),
          [
            `--kubeconfig=${cp.kubeconfigPath}`,
            'get',
            'secrets',
            '-n',
            'kube-system',
            '--watch',
            '-o',
            'name',
          ],
          { stdio: ['ignore', 'pipe', 'ignore'] },
        );
        let tokenLog = '';
        tokens.stdout.setEncoding('utf8').on('data', (d: string) => (tokenLog += d));
        stopTokenWatch = () => tokens.kill('SIGTERM');
        await cp.applyYaml(
          [
            'apiVersion: v1',
            'kind: Secret',
            'metadata: {name: workers-userdata}',
            'stringData: {userData: "join --token <<BOOTSTRAP_TOKEN>> --name <<MACHINE_NAME>>"}',
            '---',
            'apiVersion: machine.sapcloud.io/v1alpha1',
            'kind: MachineClass',
            'metadata: {name: virtual}',
            'provider: virtual',
            'providerSpec: {}',
            `secretRef: {name: workers-userdata, namespace: ${NS}}`,
            '---',
            'apiVersion: machine.sapcloud.io/v1alpha1',
            'kind: MachineDeployment',
            'metadata: {name: workers}',
            'spec:',
            '  replicas: 2',
            '  selector: {matchLabels: {pool: workers}}',
            '  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}',
            '  template:',
            '    metadata: {labels: {pool: workers}}',
            '    spec: {class: {kind: MachineClass, name: virtual}}',
            '',
          ].join('\n'),
          NS,
        );
        const phases = async (): Promise<string[]> => {
          const r = await kubectl(['get', 'machines.machine.sapcloud.io', '-n', NS, '-o', 'json']);
          const items = (
            JSON.parse(r.stdout) as { items: { status?: { currentStatus?: { phase?: string } } }[] }
          ).items;
          return items.map((m) => m.status?.currentStatus?.phase ?? '');
        };
        await until(
          'two Running machines',
          async () => {
            const p = await phases();
            return p.length === 2 && p.every((x) => x === 'Running');
          },
          90_000,
        );
        const nodes = await kubectl(['get', 'nodes', '-o', 'name']);
        expect(nodes.stdout.trim().split('\n')).to.have.length(2);
        await until(
          "the joined machines' bootstrap tokens deleted",
          async () =>
            !(await kubectl(['get', 'secrets', '-n', 'kube-system', '-o', 'name'])).stdout.includes(
              'bootstrap-token-',
            ),
          30_000,
        );
        expect(tokenLog, 'no bootstrap token Secret was created').to.match(
          /secret\/bootstrap-token-[0-9a-z]{6}/,
        );

        // The gRPC server took the chart's server certificate and serves the chart's client
        // certificate for the Service name, as cluster-autoscaler will present them; a client
        // certificate of the server CA (the server's own, which carries clientAuth) is refused.
        const secret = async (name: string): Promise<(k: string) => Buffer> => {
          const r = await kubectl(['get', 'secret', name, '-n', NS, '-o', 'json']);
          const data = (JSON.parse(r.stdout) as { data: Record<string, string> }).data;
          return (k) => Buffer.from(data[k] ?? '', 'base64');
        };
        const clientPem = await secret(`${FULLNAME}-autoscaler-client-tls`);
        const serverPem = await secret(`${FULLNAME}-grpc-server-tls`);
        const dial = (cert: Buffer, key: Buffer): CloudProviderClient =>
          cloudProviderClient(
            `127.0.0.1:${grpcPort}`,
            credentials.createSsl(clientPem('ca.crt'), key, cert),
            {
              'grpc.ssl_target_name_override': `${FULLNAME}-grpc.${NS}.svc`,
              'grpc.use_local_subchannel_pool': 1,
            },
          );
        const autoscaler = dial(clientPem('tls.crt'), clientPem('tls.key'));
        const intruder = dial(serverPem('tls.crt'), serverPem('tls.key'));
        try {
          const groups = (await autoscaler.call('NodeGroups')).nodeGroups as { id: string }[];
          expect(groups.map((g) => g.id)).to.deep.equal([`${NS}/workers`]);
          let code: number | undefined;
          try {
            await intruder.call('NodeGroups');
          } catch (err) {
            code = grpcCode(err);
          }
          // Refused at the handshake (UNAVAILABLE); PERMISSION_DENIED would also keep it out.
          expect([status.UNAVAILABLE, status.PERMISSION_DENIED]).to.include(code);
        } finally {
          autoscaler.close();
          intruder.close();
        }

        // Every metric family the alerts and the dashboard use is exported (or comes with pending work).
        const metrics = await httpGetText(`http://127.0.0.1:${metricsPort}/metrics`);
        const exported = new Set([...metrics.text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1] ?? ''));
        const rendered = parseManifests(
          await helm.template(RELEASE, NS, ['--set', 'metrics.prometheusRule.enabled=true']),
        );
        const ruleExprs = (
          findDoc(rendered, 'PrometheusRule').spec as { groups: { rules: { expr: string }[] }[] }
        ).groups.flatMap((g) => g.rules.map((r) => r.expr));
        const dash = JSON.parse(
          readFileSync(path.join(CHART_DIR, 'dashboards', 'machine-controller-manager.json'), 'utf8'),
        ) as { panels: { targets?: { expr: string }[] }[] };
        const used = new Set(
          [...ruleExprs, ...dash.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr))].flatMap(
            metricNamesIn,
          ),
        );
        used.delete('up'); // Prometheus's own
        const unknown = [...used].filter((m) => !exported.has(m));
        expect(unknown, 'alerts or dashboard use metrics the manager does not export').to.deep.equal([]);

        const scale = await kubectl([
          'scale',
          'machinedeployment.machine.sapcloud.io/workers',
          '-n',
          NS,
          '--replicas=0',
        ]);
        expect(scale.code, scale.stderr).to.equal(0);
        await until(
          'machines and nodes deleted',
          async () => {
            const p = await phases();
            const n = await kubectl(['get', 'nodes', '-o', 'name']);
            return p.length === 0 && n.stdout.trim() === '';
          },
          90_000,
        );
        // A refused request logs the API server's message ("… is forbidden: User … cannot …") or,
        // without a body, "HTTP 403"; a bare 403 is no refusal (a join took 403 ms).
        expect(log).to.not.match(/forbidden|\bHTTP 403\b/i);
        expect(log).to.contain('controllers started');
      } catch (err) {
        const tail = log.split('\n').slice(-30).join('\n');
        throw new Error(
          `${err instanceof Error ? err.message : String(err)}\nmanager log (last lines):\n${tail}`,
          {
            cause: err,
          },
        );
      } finally {
        stopTokenWatch();
        child.kill('SIGTERM');
        expect(await exited, 'manager exit code after SIGTERM').to.equal(0);
      }
    });
  });
});
