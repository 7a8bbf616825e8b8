// Which clients may call the externalgrpc service (--grpc-client-allowed-names). The TLS handshake
// already proved that the client holds a certificate the client CA signed; this narrows that to
// the names the operator listed, matched against the certificate's subject common name and DNS
// subject alternative names. Exact, case-sensitive matching: no wildcards, no suffixes.

import type { PeerCertificate } from 'node:tls';

import type { Clock } from '../kube/clock.js';
import type { Logger } from '../observability/logger.js';

/** The names a client certificate presents. */
export interface ClientIdentity {
  commonNames: string[];
  dnsNames: string[];
}

/**
 * Parses Node's subjectaltname string ("DNS:a, DNS:b, IP Address:10.0.0.1"). Node quotes a value
 * (as a JSON string) when it holds a comma, a quote or another character that would make the list
 * ambiguous, so a crafted name cannot smuggle in a second entry.
 */
export function parseSubjectAltNames(s: string | undefined): { type: string; value: string }[] {
  const out: { type: string; value: string }[] = [];
  if (s === undefined || s === '') return out;
  const entry = /(?:^|, )([^:,]+):("(?:[^"\\]|\\.)*"|[^,]*)/gy;
  for (let m = entry.exec(s); m !== null; m = entry.exec(s)) {
    const raw = m[2] ?? '';
    let value = raw;
    if (raw.startsWith('"')) {
      try {
        value = JSON.parse(raw) as string;
      } catch {
        continue; // not Node's quoting: never match on it
      }
    }
    out.push({ type: m[1] ?? '', value });
  }
  return out;
}

/** The identity of a verified peer certificate, or undefined without one. */
export function clientIdentity(cert: PeerCertificate | undefined): ClientIdentity | undefined {
  if (cert === undefined) return undefined;
  // A subject may repeat an attribute; Node then gives an array.
  const cn = (cert.subject as Record<string, string | string[] | undefined> | undefined)?.CN;
  const commonNames = cn === undefined ? [] : Array.isArray(cn) ? cn : [cn];
  const dnsNames = parseSubjectAltNames(cert.subjectaltname)
    .filter((e) => e.type === 'DNS')
    .map((e) => e.value);
  return { commonNames, dnsNames };
}

/** Whether the client may call: always with an empty allowlist, else when one of its names is listed. */
export function isAllowedClient(id: ClientIdentity | undefined, allowed: ReadonlySet<string>): boolean {
  if (allowed.size === 0) return true;
  if (id === undefined) return false;
  return id.commonNames.some((n) => allowed.has(n)) || id.dnsNames.some((n) => allowed.has(n));
}

/** The presented identity in words, for the refusal message and the log (never the allowlist). */
export function describeClient(id: ClientIdentity | undefined): string {
  if (id === undefined) return 'no verified client certificate';
  const parts = [
    ...id.commonNames.map((n) => `CN=${JSON.stringify(n)}`),
    ...id.dnsNames.map((n) => `DNS:${JSON.stringify(n)}`),
  ];
  return parts.length === 0 ? 'a client certificate without a common name or DNS name' : parts.join(', ');
}

/** How often one refused identity is logged. */
const REFUSAL_LOG_INTERVAL_MS = 60_000;
/** Identities remembered for rate limiting; the oldest is forgotten beyond this. */
const REFUSAL_LOG_IDENTITIES = 256;

/**
 * Logs refused clients at info, at most once a minute per identity with the number of calls
 * refused since its last line: the autoscaler makes thousands of calls per loop, and a refused one
 * keeps retrying.
 */
export class RefusalLog {
  private readonly seen = new Map<string, { loggedAt: number; suppressed: number }>();

  constructor(
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {}

  refused(client: string, method: string): void {
    const now = this.clock.now();
    const entry = this.seen.get(client);
    if (entry !== undefined && now - entry.loggedAt < REFUSAL_LOG_INTERVAL_MS) {
      entry.suppressed++;
      return;
    }
    this.log.info('autoscaler client refused: its certificate is not in --grpc-client-allowed-names', {
      client,
      method,
      ...(entry === undefined ? {} : { refusedSinceLastLine: entry.suppressed + 1 }),
    });
    this.seen.delete(client);
    this.seen.set(client, { loggedAt: now, suppressed: 0 });
    if (this.seen.size > REFUSAL_LOG_IDENTITIES) {
      const oldest = this.seen.keys().next();
      if (oldest.done !== true) this.seen.delete(oldest.value);
    }
  }
}
