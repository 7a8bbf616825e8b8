import http from 'node:http';
import type { AddressInfo } from 'node:net';

import type { Registry } from 'prom-client';

import type { Logger } from './logger.js';

export interface HealthSource {
  /** Process is alive and its loops are running. */
  healthy(): boolean;
  /** Ready to do its job; see readiness() for what that means for the manager. */
  ready(): { ready: boolean; reason: string };
}

/** What readiness is judged from: a replica of the manager at one moment. */
export interface ReplicaState {
  stopping: boolean;
  /** Every informer has listed once (the caches hold the cluster's state). */
  synced: boolean;
  /** This replica runs the controllers (it leads, or runs without leader election). */
  running: boolean;
  /** This replica campaigns for the Lease without holding it. */
  standby: boolean;
}

/**
 * /readyz: 200 once the caches are synced and this replica either runs the controllers (the
 * leader, or the only replica without leader election) or stands by warm for the Lease (caches
 * synced, campaigning). A replica still listing, one that holds the Lease but has not started its
 * controllers, and one shutting down are not ready.
 */
export function readiness(s: ReplicaState): { ready: boolean; reason: string } {
  if (s.stopping) return { ready: false, reason: 'shutting down' };
  if (!s.synced) return { ready: false, reason: 'caches not synced yet' };
  if (s.running) return { ready: true, reason: 'leading' };
  if (s.standby) return { ready: true, reason: 'standing by for leadership' };
  return { ready: false, reason: 'controllers not started yet' };
}

/** Serves /metrics (Prometheus), /healthz and /readyz. */
export class ObservabilityServer {
  private server: http.Server | undefined;

  constructor(
    private readonly registry: Registry,
    private readonly health: HealthSource,
    private readonly log: Logger,
  ) {}

  async listen(address: string, port: number): Promise<number> {
    const server = http.createServer((req, res) => {
      void this.handle(req, res);
    });
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, address, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const bound = (server.address() as AddressInfo).port;
    this.log.info('serving metrics and health endpoints', { address, port: bound });
    return bound;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    try {
      if (path === '/metrics') {
        const body = await this.registry.metrics();
        res.writeHead(200, { 'Content-Type': this.registry.contentType });
        res.end(body);
      } else if (path === '/healthz' || path === '/livez') {
        const ok = this.health.healthy();
        res.writeHead(ok ? 200 : 500, { 'Content-Type': 'text/plain' });
        res.end(ok ? 'ok' : 'unhealthy');
      } else if (path === '/readyz') {
        const { ready, reason } = this.health.ready();
        res.writeHead(ready ? 200 : 503, { 'Content-Type': 'text/plain' });
        res.end(ready ? 'ok' : reason);
      } else {
        res.writeHead(404, { 'Content-Type': 'text/plain' });
        res.end('not found');
      }
    } catch (err) {
      this.log.error('serving HTTP request failed', { path, err });
      res.writeHead(500);
      res.end();
    }
  }

  async close(): Promise<void> {
    const s = this.server;
    if (s === undefined) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => {
      s.close(() => {
        resolve();
      });
    });
  }
}
