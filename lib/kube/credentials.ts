import { stat, readFile } from 'node:fs/promises';
import type http from 'node:http';
import https from 'node:https';
import { createSecureContext, type SecureContext } from 'node:tls';

import type { Logger } from '../observability/logger.js';
import type { Clock } from './clock.js';
import { KubeConfig, type Cluster, type KubeConfigSource, type User } from './kubeconfig.js';

/** How often the CA, certificate and key files are checked for a change by default. */
export const DEFAULT_CREDENTIAL_CHECK_MS = 10_000;

/**
 * Connections a client keeps to its API server for requests (watches have their own, one each).
 * HTTP/1.1 needs a connection per request in flight, and each TLS connection holds about 100 KiB
 * of this process's memory (and a handshake and a goroutine on the server): a burst of a thousand
 * requests would open a thousand. Beyond this many in flight, requests wait for a free connection;
 * at a few milliseconds per request that is still thousands of requests per second, above what
 * the client-side rate limits let through (client-go multiplexes everything over one HTTP/2
 * connection).
 */
export const MAX_REQUEST_CONNECTIONS = 32;

/** Keep-alive agent options: a bounded pool for requests, an unbounded one for watch streams. */
export function agentOptions(streams: boolean): http.AgentOptions {
  return {
    keepAlive: true,
    keepAliveMsecs: 30_000,
    scheduling: 'lifo',
    ...(streams ? {} : { maxSockets: MAX_REQUEST_CONNECTIONS, maxFreeSockets: MAX_REQUEST_CONNECTIONS }),
  };
}

interface TlsMaterial {
  ca?: Buffer | undefined;
  cert?: Buffer | undefined;
  key?: Buffer | undefined;
  /** The three parsed once, for every connection of the agent. */
  context: SecureContext;
}

interface TlsState {
  /** Requests (a bounded pool). */
  agent: https.Agent;
  /** Watch streams (a connection each, held for minutes). */
  streamAgent: https.Agent;
  /** Identity of the files the material was read from (empty for inline data). */
  stamp: string;
  material: TlsMaterial;
}

function sameBuffer(a: Buffer | undefined, b: Buffer | undefined): boolean {
  return a === undefined || b === undefined ? a === b : a.equals(b);
}

/** Stops an agent that is no longer used: idle sockets now, busy ones once their request ends. */
function retire(agent: https.Agent): void {
  for (const sockets of Object.values(agent.freeSockets)) for (const s of sockets ?? []) s.destroy();
  agent.on('free', (socket: { destroy(): void }) => {
    socket.destroy();
  });
}

/**
 * The credentials of one kubeconfig context, read once and cached: the TLS material (CA, client
 * certificate and key) in a keep-alive agent, and the authorization headers from client-node's
 * authenticators (bearer token, token file, exec plugin), which cache and refresh on their own.
 *
 * Material that comes from files is reloaded when a file changes (checked at most every
 * checkIntervalMs, by inode, size and modification time, so a Secret volume's symlink swap counts):
 * requests then open connections with the new certificate, requests under way finish on the old
 * one. A half-written rotation (certificate and key that do not match, a file missing for a moment)
 * keeps the previous material until the next check.
 */
export class ClientCredentials {
  private readonly cluster: Cluster | null;
  private readonly user: User | null;
  /** The same context without TLS material: computing headers reads no certificate files. */
  private readonly headerConfig: KubeConfig;
  private readonly files: string[];
  private tls: TlsState | undefined;
  private checkedAt = Number.NEGATIVE_INFINITY;
  private refreshing: Promise<void> | undefined;

  constructor(
    kubeConfig: KubeConfigSource,
    private readonly opts: {
      clock: Clock;
      checkIntervalMs?: number | undefined;
      logger?: Logger | undefined;
    },
  ) {
    this.cluster = kubeConfig.getCurrentCluster();
    this.user = kubeConfig.getCurrentUser();
    this.files = [this.cluster?.caFile, this.user?.certFile, this.user?.keyFile].filter(
      (f): f is string => f !== undefined && f !== '',
    );
    const clusterName = this.cluster?.name;
    const userName = this.user?.name;
    this.headerConfig = KubeConfig.fromOptions({
      clusters: kubeConfig.getClusters().map((c) => {
        if (c.name !== clusterName) return c;
        const { caFile: _caFile, caData: _caData, ...rest } = c;
        return rest;
      }),
      users: kubeConfig.getUsers().map((u) => {
        if (u.name !== userName) return u;
        const { certFile: _cf, certData: _cd, keyFile: _kf, keyData: _kd, ...rest } = u;
        return rest;
      }),
      contexts: kubeConfig.getContexts(),
      currentContext: kubeConfig.getCurrentContext(),
    });
  }

  /**
   * The agent with the current TLS material (checking the files when the interval has passed):
   * the watch streams' own when `streams`, else the requests'.
   */
  async agent(streams = false): Promise<https.Agent> {
    const interval = this.opts.checkIntervalMs ?? DEFAULT_CREDENTIAL_CHECK_MS;
    const now = this.opts.clock.now();
    if (this.tls === undefined || now - this.checkedAt >= interval) {
      this.refreshing ??= this.refresh(now).finally(() => {
        this.refreshing = undefined;
      });
      await this.refreshing;
    }
    const tls = this.tls;
    if (tls === undefined) throw new Error('no TLS material');
    return streams ? tls.streamAgent : tls.agent;
  }

  /** Authorization (and impersonation) headers for one request. */
  async headers(): Promise<Record<string, string>> {
    const o: https.RequestOptions = {};
    await this.headerConfig.applyToHTTPSOptions(o);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(o.headers ?? {})) {
      if (typeof v === 'string') headers[k] = v;
      else if (typeof v === 'number') headers[k] = String(v);
    }
    if (o.auth !== undefined && o.auth !== null) {
      headers.Authorization = `Basic ${Buffer.from(o.auth).toString('base64')}`;
    }
    return headers;
  }

  /** Closes the agents' sockets (on shutdown). */
  close(): void {
    this.tls?.agent.destroy();
    this.tls?.streamAgent.destroy();
  }

  private async stamp(): Promise<string> {
    const parts = await Promise.all(
      this.files.map(async (f) => {
        const s = await stat(f);
        return `${f}:${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}`;
      }),
    );
    return parts.join('|');
  }

  private async read(): Promise<TlsMaterial> {
    const load = async (file: string | undefined, data: string | undefined): Promise<Buffer | undefined> => {
      if (file !== undefined && file !== '') return readFile(file);
      if (data !== undefined && data !== '') return Buffer.from(data, 'base64');
      return undefined;
    };
    const [ca, cert, key] = await Promise.all([
      load(this.cluster?.caFile, this.cluster?.caData),
      load(this.user?.certFile, this.user?.certData),
      load(this.user?.keyFile, this.user?.keyData),
    ]);
    // Throws when the certificate and key do not belong together (a rotation half done).
    const context = createSecureContext({ ca, cert, key });
    return { ca, cert, key, context };
  }

  private async refresh(now: number): Promise<void> {
    this.checkedAt = now;
    const current = this.tls;
    let stamp: string;
    let material: TlsMaterial;
    try {
      stamp = await this.stamp();
      if (current?.stamp === stamp) return;
      material = await this.read();
    } catch (err) {
      if (current === undefined) throw err;
      this.opts.logger?.warn('cannot reload the client credentials; keeping the current ones', { err });
      return;
    }
    if (
      current !== undefined &&
      sameBuffer(current.material.ca, material.ca) &&
      sameBuffer(current.material.cert, material.cert) &&
      sameBuffer(current.material.key, material.key)
    ) {
      current.stamp = stamp;
      return;
    }
    // The parsed context (CA, certificate, key) serves every connection: without it each new
    // connection parses the three again, and with them as options the agent turns them into its
    // pool key on every request. An agent serves one set of material, so it needs no such key.
    const options = (streams: boolean): https.AgentOptions => {
      const o: https.AgentOptions = { ...agentOptions(streams), secureContext: material.context };
      if (this.cluster?.skipTLSVerify === true) o.rejectUnauthorized = false;
      if (this.cluster?.tlsServerName !== undefined) o.servername = this.cluster.tlsServerName;
      return o;
    };
    this.tls = {
      agent: new https.Agent(options(false)),
      streamAgent: new https.Agent(options(true)),
      stamp,
      material,
    };
    if (current !== undefined) {
      retire(current.agent);
      retire(current.streamAgent);
      this.opts.logger?.info('reloaded the client credentials (CA, certificate or key changed)', {
        files: this.files,
      });
    }
  }
}
