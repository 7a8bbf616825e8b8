// An HTTP proxy in front of the EC2 emulator for what the emulator cannot do by itself: EC2 error
// answers (capacity, throttling) for chosen calls, latency, and answers lost on the way back (the
// call was executed, the client never learns it), and real EC2's eventual consistency (a new
// instance missing from DescribeInstances for a while), and answers rewritten on the way back (an
// impaired status check). It also counts EC2 calls by action.

import http from 'node:http';
import { randomUUID } from 'node:crypto';

export interface Ec2FaultRule {
  /** The EC2 action (`RunInstances`, …); any action when unset. */
  action?: string;
  /** A further condition on the request's parameters (e.g. its InstanceType). */
  match?: (params: URLSearchParams) => boolean;
  /** How many requests the rule applies to (unlimited when unset). */
  times?: number;
  /** Answer this EC2 error instead of forwarding. */
  error?: { status: number; code: string; message: string };
  /** Forward, let the emulator execute the call, then close the connection without an answer. */
  dropAnswer?: boolean;
  /** Forward after this long. */
  delayMs?: number;
  /** Rewrite the emulator's successful (2xx) XML answer before it goes back (e.g. impairedStatus). */
  rewrite?: (xml: string, params: URLSearchParams) => string;
  /**
   * Forward, let the emulator execute the call, then hold its answer until this settles (it is
   * given the answer): the caller learns late what the cloud has done already.
   */
  hold?: (xml: string, params: URLSearchParams) => Promise<void>;
}

/** The top-level `<item>` elements of a `<set>` in an EC2 XML answer, and where the set's inside is. */
function setItems(xml: string, set: string): { items: string[]; open: number; close: number } | undefined {
  const openTag = `<${set}>`;
  const open = xml.indexOf(openTag);
  const close = xml.lastIndexOf(`</${set}>`);
  if (open < 0 || close < 0) return undefined;
  const inner = xml.slice(open + openTag.length, close);
  const items: string[] = [];
  let depth = 0;
  let start = -1;
  const tag = /<(\/?)item>/g;
  for (let m = tag.exec(inner); m !== null; m = tag.exec(inner)) {
    if (m[1] === '') {
      if (depth === 0) start = m.index;
      depth++;
    } else if (--depth === 0) items.push(inner.slice(start, m.index + m[0].length));
  }
  return { items, open: open + openTag.length, close };
}

/**
 * A DescribeInstanceStatus answer in which the given instances' checks read `impaired`, their
 * reachability detail `failed` (with EC2's `impairedSince` when `since` is given), as real EC2
 * reports a failed status check; the emulator only ever reports `ok`.
 */
export function impairedStatus(
  xml: string,
  instanceIds: ReadonlySet<string>,
  opts: { checks?: readonly ('instanceStatus' | 'systemStatus')[]; since?: Date } = {},
): string {
  const set = setItems(xml, 'instanceStatusSet');
  if (set === undefined) return xml;
  const checks = opts.checks ?? ['systemStatus'];
  const since =
    opts.since === undefined
      ? ''
      : `<impairedSince>${opts.since.toISOString().replace(/\.\d{3}Z$/, '.000Z')}</impairedSince>`;
  const items = set.items.map((item) => {
    const id = /<instanceId>([^<]+)<\/instanceId>/.exec(item)?.[1] ?? '';
    if (!instanceIds.has(id)) return item;
    let out = item;
    for (const check of checks) {
      const impaired =
        `<${check}><status>impaired</status><details><item><name>reachability</name>` +
        `<status>failed</status>${since}</item></details></${check}>`;
      const existing = new RegExp(`<${check}>[\\s\\S]*?</${check}>`);
      out = existing.test(out)
        ? out.replace(existing, impaired)
        : out.replace(/<\/item>$/, `${impaired}</item>`);
    }
    return out;
  });
  return `${xml.slice(0, set.open)}${items.join('')}${xml.slice(set.close)}`;
}

function errorXml(code: string, message: string): string {
  const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  return (
    '<?xml version="1.0" encoding="UTF-8"?>\n' +
    `<Response><Errors><Error><Code>${esc(code)}</Code><Message>${esc(message)}</Message></Error></Errors>` +
    `<RequestID>${randomUUID()}</RequestID></Response>`
  );
}

/**
 * An EC2 answer in which every instance's private DNS name is its resource name
 * (`i-0123456789abcdef0.<region>.compute.internal`, EC2's hostname type resource-name) instead of
 * the emulator's IP name. The emulator hands a terminated instance's private IP to the next
 * instance at once, so with IP names a new instance can come up with an old node's name; resource
 * names never repeat.
 */
export function withResourceNames(xml: string, region: string): string {
  const marks = [...xml.matchAll(/<instanceId>(i-[^<]+)<\/instanceId>/g)];
  if (marks.length === 0) return xml;
  let out = xml.slice(0, marks[0]?.index ?? 0);
  for (let k = 0; k < marks.length; k++) {
    const m = marks[k];
    if (m === undefined) continue;
    const end = marks[k + 1]?.index ?? xml.length;
    const segment = xml.slice(m.index, end);
    out += segment.replace(
      /<privateDnsName>([^<]+)<\/privateDnsName>/g,
      `<privateDnsName>${m[1] ?? ''}.${region}.compute.internal</privateDnsName>`,
    );
  }
  return out;
}

/** The attempt an AWS SDK's `amz-sdk-request: attempt=N; max=M` header names (1 without one). */
export function sdkAttempt(header: string | string[] | undefined): number {
  const value = Array.isArray(header) ? header[0] : header;
  const n = Number(/attempt=(\d+)/.exec(value ?? '')?.[1] ?? '1');
  return Number.isFinite(n) && n > 0 ? n : 1;
}

export class Ec2FaultProxy {
  private server: http.Server | undefined;
  private rules: { rule: Ec2FaultRule; used: number }[] = [];
  /** EC2 calls that reached the proxy, by action (faulted ones included). */
  readonly calls = new Map<string, number>();
  /** Requests a rule applied to, by action. */
  readonly faulted = new Map<string, number>();
  /**
   * Requests an SDK sent again on its own (its `amz-sdk-request` header says attempt 2 or later:
   * the AWS SDKs for JavaScript v3 and Go v2 both send it), by action.
   */
  readonly retried = new Map<string, number>();
  /** TerminateInstances requests naming an instance, by instance id (retries included). */
  readonly terminations = new Map<string, number>();
  endpoint = '';
  /**
   * Sees every call the emulator executed and its answer (also when the answer is then dropped):
   * the kubelet simulator learns of started instances here instead of polling EC2.
   */
  onAnswer: ((action: string, params: URLSearchParams, status: number, body: Buffer) => void) | undefined;

  /**
   * `resourceNamesIn`: the region whose resource names (withResourceNames) replace the emulator's
   * IP names in every RunInstances and DescribeInstances answer. `keepHost`: forward the client's
   * Host header, which its request signature covers (for an emulator that checks signatures).
   */
  constructor(
    private readonly upstream: string,
    private readonly opts: { resourceNamesIn?: string; keepHost?: boolean } = {},
  ) {}

  async start(): Promise<string> {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        void this.handle(req, res, Buffer.concat(chunks));
      });
    });
    this.server.keepAliveTimeout = 5_000;
    await new Promise<void>((resolve) => this.server?.listen(0, '127.0.0.1', resolve));
    const addr = this.server.address();
    if (addr === null || typeof addr === 'string') throw new Error('the EC2 proxy has no port');
    this.endpoint = `http://127.0.0.1:${addr.port}`;
    return this.endpoint;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => {
      if (this.server === undefined) resolve();
      else
        this.server.close(() => {
          resolve();
        });
    });
  }

  /** Instance ids DescribeInstances answers leave out, with how many answers still to leave them out of. */
  private readonly hidden = new Map<string, number>();
  private hideAnswers = 0;
  /** DescribeInstances answers an instance was left out of (tests read it). */
  hiddenAnswers = 0;

  /**
   * From now on, every instance a RunInstances answer names is left out of the next `answers`
   * DescribeInstances answers that would list it (0 turns this off), as real EC2 may do for a
   * while after a launch.
   */
  hideNewInstances(answers: number): void {
    this.hideAnswers = answers;
    if (answers === 0) this.hidden.clear();
  }

  /** Leaves the hidden instances' reservations out of a DescribeInstances answer. */
  private withoutHidden(body: Buffer): Buffer {
    if (this.hidden.size === 0) return body;
    const xml = body.toString('utf8');
    const open = xml.indexOf('<reservationSet>');
    const close = xml.lastIndexOf('</reservationSet>');
    if (open < 0 || close < 0) return body;
    const inner = xml.slice(open + '<reservationSet>'.length, close);
    // The reservation items: top-level <item> elements of reservationSet (items nest).
    const kept: string[] = [];
    let depth = 0;
    let start = -1;
    const tag = /<(\/?)item>/g;
    let removed = false;
    for (let m = tag.exec(inner); m !== null; m = tag.exec(inner)) {
      if (m[1] === '') {
        if (depth === 0) start = m.index;
        depth++;
      } else {
        depth--;
        if (depth === 0) {
          const item = inner.slice(start, m.index + m[0].length);
          const id = /<instanceId>([^<]+)<\/instanceId>/.exec(item)?.[1] ?? '';
          const left = this.hidden.get(id);
          if (left === undefined) kept.push(item);
          else {
            removed = true;
            if (left <= 1) this.hidden.delete(id);
            else this.hidden.set(id, left - 1);
          }
        }
      }
    }
    if (!removed) return body;
    this.hiddenAnswers++;
    return Buffer.from(
      `${xml.slice(0, open)}<reservationSet>${kept.join('')}</reservationSet>${xml.slice(close + '</reservationSet>'.length)}`,
    );
  }

  rule(rule: Ec2FaultRule): void {
    this.rules.push({ rule, used: 0 });
  }

  clearRules(): void {
    this.rules = [];
    this.hideNewInstances(0);
  }

  resetCounts(): void {
    this.calls.clear();
    this.faulted.clear();
    this.retried.clear();
    this.terminations.clear();
    this.hiddenAnswers = 0;
  }

  private pick(action: string, params: URLSearchParams): Ec2FaultRule | undefined {
    for (const r of this.rules) {
      if (r.rule.action !== undefined && r.rule.action !== action) continue;
      if (r.rule.times !== undefined && r.used >= r.rule.times) continue;
      if (r.rule.match !== undefined && !r.rule.match(params)) continue;
      r.used++;
      return r.rule;
    }
    return undefined;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse, body: Buffer): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://proxy');
    const params = new URLSearchParams(body.toString('utf8'));
    for (const [k, v] of url.searchParams) params.append(k, v);
    const action = params.get('Action') ?? '';
    this.calls.set(action, (this.calls.get(action) ?? 0) + 1);
    if (sdkAttempt(req.headers['amz-sdk-request']) > 1)
      this.retried.set(action, (this.retried.get(action) ?? 0) + 1);
    if (action === 'TerminateInstances') {
      for (const [k, id] of params) {
        if (k.startsWith('InstanceId.')) this.terminations.set(id, (this.terminations.get(id) ?? 0) + 1);
      }
    }
    const rule = this.pick(action, params);
    if (rule !== undefined) this.faulted.set(action, (this.faulted.get(action) ?? 0) + 1);
    if (rule?.error !== undefined) {
      const xml = errorXml(rule.error.code, rule.error.message);
      res.writeHead(rule.error.status, {
        'content-type': 'text/xml',
        'content-length': Buffer.byteLength(xml),
      });
      res.end(xml);
      return;
    }
    if (rule?.delayMs !== undefined) await new Promise((r) => setTimeout(r, rule.delayMs));
    const target = new URL(req.url ?? '/', this.upstream);
    const up = http.request(
      target,
      {
        method: req.method,
        headers: this.opts.keepHost === true ? req.headers : { ...req.headers, host: target.host },
      },
      (upRes) => {
        const out: Buffer[] = [];
        upRes.on('data', (c: Buffer) => out.push(c));
        upRes.on('end', () => {
          // Resource names first: the kubelet simulator (onAnswer) names its Nodes as clients see them.
          let raw: Buffer = Buffer.concat(out);
          const region = this.opts.resourceNamesIn;
          if (region !== undefined && (action === 'RunInstances' || action === 'DescribeInstances'))
            raw = Buffer.from(withResourceNames(raw.toString('utf8'), region));
          this.onAnswer?.(action, params, upRes.statusCode ?? 0, raw);
          if (rule?.dropAnswer === true) {
            req.socket.destroy();
            return;
          }
          const held = rule?.hold?.(raw.toString('utf8'), params) ?? Promise.resolve();
          void held
            .catch(() => undefined)
            .then(() => {
              answer(raw);
            });
        });
        const answer = (raw: Buffer): void => {
          const headers = { ...upRes.headers };
          delete headers['transfer-encoding'];
          let data: Buffer = raw;
          if (action === 'RunInstances' && this.hideAnswers > 0 && (upRes.statusCode ?? 0) < 300) {
            for (const m of data.toString('utf8').matchAll(/<instanceId>([^<]+)<\/instanceId>/g))
              if (m[1] !== undefined) this.hidden.set(m[1], this.hideAnswers);
          }
          if (action === 'DescribeInstances') data = this.withoutHidden(data);
          if (rule?.rewrite !== undefined && (upRes.statusCode ?? 0) < 300)
            data = Buffer.from(rule.rewrite(data.toString('utf8'), params));
          res.writeHead(upRes.statusCode ?? 502, { ...headers, 'content-length': data.length });
          res.end(data);
        };
      },
    );
    up.on('error', (err) => {
      res.writeHead(502, { 'content-type': 'text/plain' });
      res.end(`EC2 proxy: upstream failed: ${err.message}`);
    });
    up.end(body);
  }
}
