// Kubeconfig loading and request authentication, built from @kubernetes/client-node's own parts
// (its kubeconfig entry parsing and its authenticators) without importing the package's root.
// The root pulls in the generated client for every Kubernetes API, about 70 MiB of resident
// memory and half a second at start, none of which this program uses: it has its own REST client.
// Behaviour follows client-node's KubeConfig for what it loads (file, $KUBECONFIG list, default
// file, in-cluster service account) and for the credentials it applies (client certificate,
// bearer token, token file, exec plugins, the azure, gcp and oidc auth providers, basic auth,
// impersonation).

import { existsSync, readFileSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type https from 'node:https';

import {
  newClusters,
  newContexts,
  newUsers,
  type Cluster,
  type Context,
  type User,
} from '@kubernetes/client-node/dist/config_types.js';
import { ExecAuth } from '@kubernetes/client-node/dist/exec_auth.js';
import { FileAuth } from '@kubernetes/client-node/dist/file_auth.js';
import yaml from 'js-yaml';

export type { Cluster, Context, User };

/** What this program needs of a kubeconfig (client-node's KubeConfig satisfies it too). */
export interface KubeConfigSource {
  getCurrentCluster(): Cluster | null;
  getCurrentUser(): User | null;
  getClusters(): Cluster[];
  getUsers(): User[];
  getContexts(): Context[];
  getCurrentContext(): string;
  /** Adds TLS material, authorization and impersonation headers (or basic auth) to the options. */
  applyToHTTPSOptions(opts: https.RequestOptions): Promise<void>;
}

/** The part of a client-node authenticator this module calls. */
interface Authenticator {
  isAuthProvider(user: User): boolean;
  applyAuthentication(user: User, opts: https.RequestOptions): Promise<void>;
}

const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';

function fromFileOrData(file: string | undefined, data: string | undefined): Buffer | undefined {
  if (file !== undefined && file !== '') return readFileSync(file);
  if (data !== undefined && data !== '') return Buffer.from(data, 'base64');
  return undefined;
}

/** The entry with a relative path in `key` resolved against root (the kubeconfig's directory). */
function absolute<T extends object>(root: string, entry: T, key: keyof T): T {
  const file = entry[key];
  if (typeof file !== 'string' || file === '' || path.isAbsolute(file)) return entry;
  return { ...entry, [key]: path.join(root, file) };
}

interface Parsed {
  clusters: Cluster[];
  users: User[];
  contexts: Context[];
  currentContext: string;
}

function parseFile(file: string): Parsed {
  const doc = (yaml.load(readFileSync(file, 'utf8')) ?? {}) as Record<string, unknown>;
  const root = path.dirname(file);
  return {
    clusters: newClusters(doc.clusters).map((c) => absolute(root, c, 'caFile')),
    users: newUsers(doc.users).map((u) => absolute(root, absolute(root, u, 'certFile'), 'keyFile')),
    contexts: newContexts(doc.contexts),
    currentContext: typeof doc['current-context'] === 'string' ? doc['current-context'] : '',
  };
}

/** Entries of later files are added unless one of the same name came earlier (kubectl's rule). */
function merge(into: Parsed, more: Parsed): Parsed {
  const add = <T extends { name: string }>(a: T[], b: T[]): T[] => [
    ...a,
    ...b.filter((x) => !a.some((y) => y.name === x.name)),
  ];
  return {
    clusters: add(into.clusters, more.clusters),
    users: add(into.users, more.users),
    contexts: add(into.contexts, more.contexts),
    currentContext: into.currentContext !== '' ? into.currentContext : more.currentContext,
  };
}

export class KubeConfig implements KubeConfigSource {
  private clusters: Cluster[] = [];
  private users: User[] = [];
  private contexts: Context[] = [];
  private currentContext = '';
  private readonly exec = new ExecAuth();
  private readonly file = new FileAuth();
  /** Authenticators of auth providers that need heavier modules, loaded on first use. */
  private readonly lazy = new Map<string, Promise<Authenticator>>();

  /** A kubeconfig file (relative certificate paths resolved against its directory). */
  static fromFile(file: string): KubeConfig {
    return new KubeConfig().load(parseFile(file));
  }

  /** Explicit entries (as client-node's loadFromOptions). */
  static fromOptions(opts: Parsed): KubeConfig {
    return new KubeConfig().load(opts);
  }

  /** The pod's service account: the in-cluster API server, its CA and its projected token. */
  static inCluster(): KubeConfig {
    const host = process.env.KUBERNETES_SERVICE_HOST ?? '';
    const port = process.env.KUBERNETES_SERVICE_PORT ?? '';
    if (host === '' || port === '')
      throw new Error(
        'not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set',
      );
    const scheme = ['80', '8080', '8001'].includes(port) ? 'http' : 'https';
    const server = `${scheme}://${isIPv6(host) ? `[${host}]` : host}:${port}`;
    return KubeConfig.fromOptions({
      clusters: [{ name: 'inCluster', server, caFile: `${SERVICE_ACCOUNT}/ca.crt`, skipTLSVerify: false }],
      users: [
        {
          name: 'inClusterUser',
          authProvider: { name: 'tokenFile', config: { tokenFile: `${SERVICE_ACCOUNT}/token` } },
        },
      ],
      contexts: [{ name: 'inClusterContext', cluster: 'inCluster', user: 'inClusterUser' }],
      currentContext: 'inClusterContext',
    });
  }

  /**
   * What kubectl would use: the files in $KUBECONFIG (merged, first wins), else ~/.kube/config,
   * else the in-cluster service account.
   */
  static fromDefault(): KubeConfig {
    const list = (process.env.KUBECONFIG ?? '').split(path.delimiter).filter((f) => f !== '');
    if (list.length > 0) {
      const [first, ...rest] = list;
      return new KubeConfig().load(rest.reduce((acc, f) => merge(acc, parseFile(f)), parseFile(first ?? '')));
    }
    const home = path.join(os.homedir(), '.kube', 'config');
    if (existsSync(home)) return KubeConfig.fromFile(home);
    if (existsSync(`${SERVICE_ACCOUNT}/token`)) return KubeConfig.inCluster();
    throw new Error(
      'no kubeconfig: $KUBECONFIG is empty, ~/.kube/config does not exist and this is not a pod',
    );
  }

  private load(p: Parsed): this {
    this.clusters = p.clusters;
    this.users = p.users;
    this.contexts = p.contexts;
    this.currentContext = p.currentContext;
    return this;
  }

  getClusters(): Cluster[] {
    return this.clusters;
  }

  getUsers(): User[] {
    return this.users;
  }

  getContexts(): Context[] {
    return this.contexts;
  }

  getCurrentContext(): string {
    return this.currentContext;
  }

  setCurrentContext(name: string): void {
    this.currentContext = name;
  }

  private context(): Context | undefined {
    return this.contexts.find((c) => c.name === this.currentContext);
  }

  getCurrentCluster(): Cluster | null {
    const name = this.context()?.cluster;
    return this.clusters.find((c) => c.name === name) ?? null;
  }

  getCurrentUser(): User | null {
    const name = this.context()?.user;
    return this.users.find((u) => u.name === name) ?? null;
  }

  private authenticator(user: User): Promise<Authenticator | undefined> {
    const provider = (user.authProvider as { name?: string } | undefined)?.name;
    const load = (name: string, make: () => Promise<Authenticator>): Promise<Authenticator> => {
      let a = this.lazy.get(name);
      if (a === undefined) {
        a = make();
        this.lazy.set(name, a);
      }
      return a;
    };
    if (provider === 'azure')
      return load(
        provider,
        async () => new (await import('@kubernetes/client-node/dist/azure_auth.js')).AzureAuth(),
      );
    if (provider === 'gcp')
      return load(
        provider,
        async () => new (await import('@kubernetes/client-node/dist/gcp_auth.js')).GoogleCloudPlatformAuth(),
      );
    if (this.exec.isAuthProvider(user)) return Promise.resolve(this.exec);
    if (this.file.isAuthProvider(user)) return Promise.resolve(this.file);
    if (provider === 'oidc')
      return load(
        provider,
        async () => new (await import('@kubernetes/client-node/dist/oidc_auth.js')).OpenIDConnectAuth(),
      );
    return Promise.resolve(undefined);
  }

  async applyToHTTPSOptions(opts: https.RequestOptions): Promise<void> {
    const cluster = this.getCurrentCluster();
    const user = this.getCurrentUser();
    if (user === null) return;
    if (cluster?.skipTLSVerify === true) opts.rejectUnauthorized = false;
    if (cluster?.tlsServerName !== undefined) opts.servername = cluster.tlsServerName;
    const ca = cluster === null ? undefined : fromFileOrData(cluster.caFile, cluster.caData);
    if (ca !== undefined) opts.ca = ca;
    const cert = fromFileOrData(user.certFile, user.certData);
    if (cert !== undefined) opts.cert = cert;
    const key = fromFileOrData(user.keyFile, user.keyData);
    if (key !== undefined) opts.key = key;
    const headers = (opts.headers ??= {}) as Record<string, string | string[] | number | undefined>;
    if (user.impersonateUser !== undefined && user.impersonateUser !== '')
      headers['Impersonate-User'] = user.impersonateUser;
    const authenticator = await this.authenticator(user);
    if (authenticator !== undefined) await authenticator.applyAuthentication(user, opts);
    if (user.token !== undefined && user.token !== '') headers.Authorization = `Bearer ${user.token}`;
    if (user.username !== undefined && user.username !== '')
      opts.auth = `${user.username}:${user.password ?? ''}`;
  }
}
