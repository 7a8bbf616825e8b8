import net from 'node:net';

/**
 * A TCP proxy on loopback in front of the apiserver, for tests that need a network fault between
 * a client and the server while the server keeps serving others: pause() freezes every byte in
 * both directions without closing anything (a silently stalled connection), cut() resets all
 * connections, resume() lets traffic flow again.
 */
export class FaultProxy {
  private server: net.Server | undefined;
  private readonly pairs = new Set<{ client: net.Socket; upstream: net.Socket; piped: boolean }>();
  private paused = false;
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<number> {
    this.server = net.createServer((client) => {
      const upstream = net.connect(this.targetPort, this.targetHost);
      const pair = { client, upstream, piped: false };
      this.pairs.add(pair);
      if (this.paused) {
        client.pause();
        upstream.pause();
      } else {
        this.connect(pair);
      }
      const close = (): void => {
        this.pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close);
      upstream.on('error', close);
      client.on('close', close);
      upstream.on('close', close);
    });
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    const addr = this.server.address();
    if (addr === null || typeof addr === 'string') throw new Error('proxy has no port');
    this.port = addr.port;
    return this.port;
  }

  private connect(pair: { client: net.Socket; upstream: net.Socket; piped: boolean }): void {
    pair.client.pipe(pair.upstream);
    pair.upstream.pipe(pair.client);
    pair.piped = true;
  }

  /** Stops forwarding in both directions; connections stay open and silent. */
  pause(): void {
    this.paused = true;
    for (const pair of this.pairs) {
      pair.client.unpipe(pair.upstream);
      pair.upstream.unpipe(pair.client);
      pair.piped = false;
      pair.client.pause();
      pair.upstream.pause();
    }
  }

  resume(): void {
    this.paused = false;
    for (const pair of this.pairs) {
      if (!pair.piped) this.connect(pair);
    }
  }

  /** Resets every open connection. */
  cut(): void {
    for (const { client, upstream } of this.pairs) {
      client.resetAndDestroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  connections(): number {
    return this.pairs.size;
  }

  async stop(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => {
      if (this.server === undefined) resolve();
      else
        this.server.close(() => {
          resolve();
        });
    });
  }
}
