import http from 'node:http';
import type { AddressInfo } from 'node:net';

import type { Registry } from 'prom-client';

import type { Logger } from './logger.js';

export interface HealthSource {
  /** Process is alive and its loops are running. */
  healthy(): boolean;
  /** Ready to do its job: caches synced and (when electing) leading or standing by. */
  ready(): { ready: boolean; reason: string };
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
