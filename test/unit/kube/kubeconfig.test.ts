import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { KubeConfig as ClientNodeKubeConfig } from '@kubernetes/client-node';
import { expect } from 'chai';

import { KubeConfig } from '../../../lib/kube/kubeconfig.js';

const CA = Buffer.from('ca-bytes').toString('base64');

function kubeconfig(users: string, current = 'ctx-token'): string {
  return `apiVersion: v1
kind: Config
current-context: ${current}
clusters:
- name: c1
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ca.crt
    tls-server-name: api.internal
- name: c2
  cluster:
    server: https://10.0.0.1:443
    certificate-authority-data: ${CA}
    insecure-skip-tls-verify: true
contexts:
- name: ctx-token
  context: {cluster: c1, user: token}
- name: ctx-file
  context: {cluster: c2, user: file}
- name: ctx-basic
  context: {cluster: c2, user: basic}
- name: ctx-cert
  context: {cluster: c1, user: cert}
- name: ctx-exec
  context: {cluster: c1, user: exec}
users:
${users}
`;
}

const USERS = `- name: token
  user: {token: abc, as: someone}
- name: file
  user:
    auth-provider: {name: tokenFile, config: {tokenFile: TOKENFILE}}
- name: basic
  user: {username: u, password: p}
- name: cert
  user: {client-certificate: certs/client.crt, client-key: certs/client.key}
- name: exec
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: sh
      args: ['-c', 'echo "{\\"apiVersion\\":\\"client.authentication.k8s.io/v1\\",\\"kind\\":\\"ExecCredential\\",\\"status\\":{\\"token\\":\\"from-exec\\"}}"']
      interactiveMode: Never`;

describe('KubeConfig (client-node parts, without its generated API)', () => {
  let dir: string;
  let file: string;

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'kc-'));
    writeFileSync(path.join(dir, 'ca.crt'), 'ca-file-bytes');
    writeFileSync(path.join(dir, 'token'), 'file-token');
    file = path.join(dir, 'config');
    writeFileSync(file, kubeconfig(USERS.replace('TOKENFILE', path.join(dir, 'token'))));
  });

  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  /** What both implementations put into the request options for one context. */
  async function both(context: string): Promise<[https.RequestOptions, https.RequestOptions]> {
    const ours = KubeConfig.fromFile(file);
    const theirs = new ClientNodeKubeConfig();
    theirs.loadFromFile(file);
    theirs.setCurrentContext(context);
    ours.setCurrentContext(context);
    const a: https.RequestOptions = {};
    const b: https.RequestOptions = {};
    await ours.applyToHTTPSOptions(a);
    await theirs.applyToHTTPSOptions(b);
    // client-node also makes an agent from the same material; ours builds its own (credentials.ts).
    delete b.agent;
    return [a, b];
  }

  const expected: Record<string, Partial<https.RequestOptions>> = {
    'ctx-token': { headers: { 'Impersonate-User': 'someone', Authorization: 'Bearer abc' } },
    'ctx-file': { headers: { Authorization: 'Bearer file-token' } },
    'ctx-basic': { auth: 'u:p' },
    'ctx-exec': { headers: { Authorization: 'Bearer from-exec' } },
  };
  for (const [context, want] of Object.entries(expected)) {
    it(`applies the same options as client-node's KubeConfig (${context})`, async () => {
      const [ours, theirs] = await both(context);
      expect(ours).to.deep.include(want);
      expect(ours).to.deep.equal(theirs);
    });
  }

  it('resolves certificate paths relative to the kubeconfig, and reads them per request', async () => {
    const kc = KubeConfig.fromFile(file);
    kc.setCurrentContext('ctx-cert');
    expect(kc.getCurrentUser()?.certFile).to.equal(path.join(dir, 'certs/client.crt'));
    expect(kc.getCurrentCluster()?.caFile).to.equal(path.join(dir, 'ca.crt'));
    expect(kc.getCurrentCluster()?.tlsServerName).to.equal('api.internal');
    let err: unknown;
    try {
      await kc.applyToHTTPSOptions({});
    } catch (e) {
      err = e;
    }
    expect(String(err)).to.contain('client.crt');
  });

  it('reads the token context with its cluster, impersonation and bearer token', () => {
    const kc = KubeConfig.fromFile(file);
    expect(kc.getCurrentContext()).to.equal('ctx-token');
    expect(kc.getCurrentCluster()?.server).to.equal('https://127.0.0.1:6443');
    expect(kc.getCurrentUser()?.impersonateUser).to.equal('someone');
  });

  it('merges the files of $KUBECONFIG, the first one winning', () => {
    const second = path.join(dir, 'second');
    writeFileSync(
      second,
      `apiVersion: v1
kind: Config
current-context: other
clusters: [{name: c1, cluster: {server: 'https://ignored:1'}}, {name: c3, cluster: {server: 'https://third:3'}}]
contexts: [{name: other, context: {cluster: c3, user: token}}]
users: []
`,
    );
    const before = process.env.KUBECONFIG;
    process.env.KUBECONFIG = [file, second].join(path.delimiter);
    try {
      const kc = KubeConfig.fromDefault();
      expect(kc.getCurrentContext()).to.equal('ctx-token');
      expect(kc.getClusters().map((c) => `${c.name}=${c.server}`)).to.deep.equal([
        'c1=https://127.0.0.1:6443',
        'c2=https://10.0.0.1:443',
        'c3=https://third:3',
      ]);
    } finally {
      if (before === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = before;
    }
  });

  it('refuses in-cluster loading outside a pod with the reason', () => {
    const host = process.env.KUBERNETES_SERVICE_HOST;
    delete process.env.KUBERNETES_SERVICE_HOST;
    try {
      expect(() => KubeConfig.inCluster()).to.throw(/KUBERNETES_SERVICE_HOST/);
    } finally {
      if (host !== undefined) process.env.KUBERNETES_SERVICE_HOST = host;
    }
  });
});
