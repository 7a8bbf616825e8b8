// The fault suite's eye: a watch on etcd itself, under the API server, for the whole scenario.
//
// Watching etcd (its v3 JSON gateway) instead of the API server gives every state the machines
// went through, in the one order etcd committed them: one revision counter orders Machines,
// MachineSets and MachineDeployments (all in one stream) and Nodes, so "at any moment" means
// "after any committed write". It also survives a restart of kube-apiserver (scenario 3), where
// an API watch would have to relist and could miss states in between. Custom resources are stored
// as JSON, so machine.sapcloud.io objects are decoded; Nodes are stored as protobuf, of which only
// the key (the node name), creations and deletions are kept.

import http from 'node:http';

export type RecordedResource = 'machines' | 'machinesets' | 'machinedeployments' | 'machineclasses' | 'nodes';

export interface RecordedEvent {
  /** etcd revision of the write. */
  rev: number;
  /** Wall-clock time the recorder received it (ms). */
  at: number;
  resource: RecordedResource;
  namespace: string;
  name: string;
  type: 'put' | 'delete';
  /** A put that created the key. */
  created: boolean;
  /** The stored object (machine.sapcloud.io puts only), without managedFields. */
  object?: Record<string, unknown>;
}

interface WatchMessage {
  result?: {
    header?: { revision?: string };
    created?: boolean;
    canceled?: boolean;
    compact_revision?: string;
    cancel_reason?: string;
    events?: {
      type?: string;
      kv?: { key?: string; value?: string; mod_revision?: string; create_revision?: string };
    }[];
  };
  error?: { message?: string };
}

const b64 = (s: string): string => Buffer.from(s).toString('base64');
const unb64 = (s: string): string => Buffer.from(s, 'base64').toString('utf8');

/** The range_end that makes a key a prefix (the prefix with its last byte incremented). */
function prefixEnd(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}

const MCM_PREFIX = '/registry/machine.sapcloud.io/';
const NODE_PREFIX = '/registry/minions/';

function postJson(url: string, body: unknown): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', timeout: 10_000 }, (res) => {
      let t = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (t += d));
      res.on('end', () => {
        try {
          resolve(JSON.parse(t));
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error(`POST ${url}: timeout`)));
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

/** etcd's current revision. */
export async function etcdRevision(endpoint: string): Promise<number> {
  const r = (await postJson(`${endpoint}/v3/kv/range`, { key: b64('/'), limit: 1 })) as {
    header?: { revision?: string };
  };
  return Number(r.header?.revision ?? 0);
}

/** One streaming watch on a key prefix, resumed from the next revision when the stream breaks. */
class PrefixWatch {
  private req: http.ClientRequest | undefined;
  private stopped = false;
  private nextRev: number;
  private retry: NodeJS.Timeout | undefined;
  error: string | undefined;

  constructor(
    private readonly endpoint: string,
    private readonly prefix: string,
    fromRev: number,
    private readonly onEvents: (events: RecordedEvent[], rev: number) => void,
  ) {
    this.nextRev = fromRev;
  }

  start(): void {
    if (this.stopped) return;
    let buf = '';
    const req = http.request(`${this.endpoint}/v3/watch`, { method: 'POST' }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        buf += d;
        let nl = buf.indexOf('\n');
        while (nl >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (line !== '') this.handle(JSON.parse(line) as WatchMessage);
          nl = buf.indexOf('\n');
        }
      });
      res.on('end', () => {
        this.reconnect();
      });
      res.on('error', () => {
        this.reconnect();
      });
    });
    req.on('error', () => {
      this.reconnect();
    });
    req.end(
      JSON.stringify({
        create_request: {
          key: b64(this.prefix),
          range_end: b64(prefixEnd(this.prefix)),
          start_revision: this.nextRev,
        },
      }),
    );
    this.req = req;
  }

  private reconnect(): void {
    if (this.stopped || this.retry !== undefined) return;
    this.req?.destroy();
    // etcd runs for the whole scenario; a broken stream is resumed where it stopped.
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.start();
    }, 200);
  }

  private handle(msg: WatchMessage): void {
    if (msg.error !== undefined) {
      this.error = msg.error.message ?? 'watch error';
      return;
    }
    const r = msg.result;
    if (r === undefined) return;
    if (r.canceled === true) {
      // Only a compaction past our position cancels; then states were lost and the figures
      // would be wrong, so the analysis refuses to run.
      this.error = `watch of ${this.prefix} canceled at compact revision ${r.compact_revision ?? '?'}: ${r.cancel_reason ?? ''}`;
      this.stopped = true;
      return;
    }
    const at = Date.now();
    const out: RecordedEvent[] = [];
    for (const e of r.events ?? []) {
      const kv = e.kv;
      if (kv?.key === undefined) continue;
      const rev = Number(kv.mod_revision ?? 0);
      const parsed = parseKey(unb64(kv.key));
      if (parsed === undefined) continue;
      const type = e.type === 'DELETE' ? 'delete' : 'put';
      const ev: RecordedEvent = {
        rev,
        at,
        ...parsed,
        type,
        created: type === 'put' && kv.create_revision === kv.mod_revision,
      };
      if (type === 'put' && parsed.resource !== 'nodes' && kv.value !== undefined) {
        const obj = JSON.parse(unb64(kv.value)) as { metadata?: Record<string, unknown> };
        if (obj.metadata !== undefined) Reflect.deleteProperty(obj.metadata, 'managedFields');
        ev.object = obj;
      }
      out.push(ev);
      this.nextRev = Math.max(this.nextRev, rev + 1);
    }
    const headerRev = Number(r.header?.revision ?? 0);
    this.onEvents(out, Math.max(headerRev, this.nextRev - 1));
  }

  stop(): void {
    this.stopped = true;
    if (this.retry !== undefined) clearTimeout(this.retry);
    this.req?.destroy();
  }
}

function parseKey(key: string): Pick<RecordedEvent, 'resource' | 'namespace' | 'name'> | undefined {
  if (key.startsWith(NODE_PREFIX))
    return { resource: 'nodes', namespace: '', name: key.slice(NODE_PREFIX.length) };
  if (!key.startsWith(MCM_PREFIX)) return undefined;
  const [resource, namespace, name] = key.slice(MCM_PREFIX.length).split('/');
  if (
    resource !== 'machines' &&
    resource !== 'machinesets' &&
    resource !== 'machinedeployments' &&
    resource !== 'machineclasses'
  )
    return undefined;
  if (namespace === undefined || name === undefined) return undefined;
  return { resource, namespace, name };
}

/** Objects as they are at the recorder's latest revision, by resource and `namespace/name`. */
export type LiveState = Record<RecordedResource, Map<string, RecordedEvent>>;

/**
 * Records every write to machine.sapcloud.io objects and Nodes from the moment it starts, keeps
 * the latest state of each (for waiting on conditions without asking the API server), and hands
 * the whole timeline to the analysis.
 */
export class Recorder {
  readonly events: RecordedEvent[] = [];
  readonly live: LiveState = {
    machines: new Map(),
    machinesets: new Map(),
    machinedeployments: new Map(),
    machineclasses: new Map(),
    nodes: new Map(),
  };
  /** Highest revision each watch has confirmed (header revision): the state is complete up to min of both. */
  private readonly seen = [0, 0];
  private watches: PrefixWatch[] = [];
  private maxRev = 0;
  startRev = 0;

  constructor(private readonly etcdEndpoint: string) {}

  async start(): Promise<void> {
    this.startRev = await etcdRevision(this.etcdEndpoint);
    this.maxRev = this.startRev;
    this.seen[0] = this.seen[1] = this.startRev;
    this.watches = [MCM_PREFIX, NODE_PREFIX].map(
      (p, i) =>
        new PrefixWatch(this.etcdEndpoint, p, this.startRev + 1, (events, rev) => {
          this.apply(events);
          this.seen[i] = Math.max(this.seen[i] ?? 0, rev);
        }),
    );
    for (const w of this.watches) w.start();
  }

  private apply(events: RecordedEvent[]): void {
    for (const e of events) {
      this.events.push(e);
      this.maxRev = Math.max(this.maxRev, e.rev);
      const map = this.live[e.resource];
      const key = `${e.namespace}/${e.name}`;
      if (e.type === 'delete') map.delete(key);
      else map.set(key, e);
    }
  }

  /** The revision up to which both streams have delivered everything. */
  get revision(): number {
    return Math.min(...this.seen);
  }

  /** The highest revision recorded so far. */
  lastEventRev(): number {
    return this.maxRev;
  }

  /** Throws when a watch failed in a way that lost states. */
  check(): void {
    for (const w of this.watches) if (w.error !== undefined) throw new Error(`recorder: ${w.error}`);
  }

  /** Every recorded event in etcd order. */
  timeline(): RecordedEvent[] {
    return [...this.events].sort((a, b) => a.rev - b.rev);
  }

  stop(): void {
    for (const w of this.watches) w.stop();
  }
}
