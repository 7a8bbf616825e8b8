// The gRPC server's mutual-TLS material (server certificate, its key, the client CA bundle), read
// from files and reloaded while the server runs: cert-manager renews the server certificate every
// few weeks and the kubelet swaps the mounted Secret's files in place, so reading them once at start
// would fail every handshake after the old certificate expires.
//
// The files are watched (their directories: the kubelet replaces a `..data` symlink, which a watch
// on the file itself would not see) and checked again every minute in case a filesystem reports no
// events. A change is re-read as a set and validated (certificate and key belong together, every
// file parses, Node accepts the combination) before it replaces the material in use; a half-written
// or broken set is logged and ignored, and the previous material stays. New connections get the new
// certificate; connections already open keep theirs. The server applies each update with
// setSecureContext on its listening HTTP/2 server (onUpdate).

import { X509Certificate, createPrivateKey } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { createSecureContext, type SecureContextOptions } from 'node:tls';

import type { Clock, TimerHandle } from '../kube/clock.js';
import { errorMessage } from '../kube/errors.js';
import type { Logger } from '../observability/logger.js';
import type { AutoscalerMetrics } from './metrics.js';

export interface TlsFiles {
  certFile: string;
  keyFile: string;
  clientCAFile: string;
}

/** What a certificate says about itself: enough to tell two apart in a log, nothing secret. */
export interface CertificateSummary {
  subject: string;
  notAfter: string;
  sha256: string;
}

/** A validated set: the server certificate (chain), its key and the client CA bundle. */
export interface TlsMaterial {
  cert: Buffer;
  key: Buffer;
  clientCA: Buffer;
  server: CertificateSummary;
  /** When the server certificate expires (ms since the epoch). */
  serverExpiresAt: number;
  clientCAs: CertificateSummary[];
}

export class TlsMaterialError extends Error {
  override name = 'TlsMaterialError';
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

function certificatesIn(pem: Buffer, file: string): X509Certificate[] {
  const blocks = pem.toString('utf8').match(PEM_CERTIFICATE) ?? [];
  if (blocks.length === 0) throw new TlsMaterialError(`${file} holds no PEM certificate`);
  return blocks.map((b, i) => {
    try {
      return new X509Certificate(b);
    } catch (err) {
      throw new TlsMaterialError(`${file}: certificate ${i + 1} does not parse: ${errorMessage(err)}`, {
        cause: err,
      });
    }
  });
}

function summary(c: X509Certificate): CertificateSummary {
  return {
    subject: c.subject.replace(/\n/g, ', '),
    notAfter: new Date(c.validTo).toISOString(),
    sha256: c.fingerprint256,
  };
}

/**
 * Validates a set read from the files. Throws TlsMaterialError naming the file and the problem
 * (never the key's content) when the set cannot serve: no certificate, a key that does not parse or
 * does not belong to the certificate, an empty or unparseable client CA bundle.
 */
export function validateTlsMaterial(
  files: TlsFiles,
  cert: Buffer,
  key: Buffer,
  clientCA: Buffer,
): TlsMaterial {
  const [leaf] = certificatesIn(cert, files.certFile);
  if (leaf === undefined) throw new TlsMaterialError(`${files.certFile} holds no PEM certificate`);
  let privateKey;
  try {
    privateKey = createPrivateKey(key);
  } catch (err) {
    throw new TlsMaterialError(`${files.keyFile} holds no usable PEM private key (${errorMessage(err)})`, {
      cause: err,
    });
  }
  if (!leaf.checkPrivateKey(privateKey)) {
    throw new TlsMaterialError(
      `the certificate in ${files.certFile} (${summary(leaf).subject}) does not belong to the key in ${files.keyFile}`,
    );
  }
  const cas = certificatesIn(clientCA, files.clientCAFile);
  try {
    createSecureContext({ cert, key, ca: clientCA });
  } catch (err) {
    throw new TlsMaterialError(
      `${files.certFile}, ${files.keyFile} and ${files.clientCAFile} are refused by TLS: ${errorMessage(err)}`,
      { cause: err },
    );
  }
  return {
    cert,
    key,
    clientCA,
    server: summary(leaf),
    serverExpiresAt: Date.parse(leaf.validTo),
    clientCAs: cas.map(summary),
  };
}

/** Reads the three files together and validates them. */
async function loadTlsMaterial(files: TlsFiles): Promise<TlsMaterial> {
  const [cert, key, clientCA] = await Promise.all([
    readFile(files.certFile),
    readFile(files.keyFile),
    readFile(files.clientCAFile),
  ]);
  return validateTlsMaterial(files, cert, key, clientCA);
}

export type ReloadResult = 'unchanged' | 'reloaded' | 'rejected';

export interface ReloadingTlsOptions {
  clock: Clock;
  logger: Logger;
  metrics: AutoscalerMetrics;
}

/** Quiet time after a file event before the files are read (coalesces one rotation's events). */
const DEBOUNCE_MS = 200;
/** Period of the re-check that needs no file event (a filesystem without events, a failed watch). */
const RECHECK_MS = 60_000;

function sameContent(m: TlsMaterial, cert: Buffer, key: Buffer, clientCA: Buffer): boolean {
  return m.cert.equals(cert) && m.key.equals(key) && m.clientCA.equals(clientCA);
}

/** Fields of a log line that describe a set (subjects, expiry, fingerprints). */
export function describeTlsMaterial(m: TlsMaterial): Record<string, unknown> {
  return {
    serverCertificate: m.server,
    clientCAs: m.clientCAs,
  };
}

/** What a TLS server serves with: the certificate, its key and the client CA bundle. */
export function secureContextOptions(m: TlsMaterial): SecureContextOptions {
  return { cert: m.cert, key: m.key, ca: m.clientCA };
}

/** The server's certificate, key and client CA, following the files. */
export class ReloadingServerTls {
  private readonly listeners = new Set<(material: TlsMaterial) => void>();
  private readonly log: Logger;
  private readonly watchers: FSWatcher[] = [];
  private debounce: TimerHandle | undefined;
  private recheck: TimerHandle | undefined;
  private chain: Promise<ReloadResult> = Promise.resolve('unchanged');
  /** The problem last logged, so that a set that stays broken is logged once. */
  private lastProblem: string | undefined;
  private stopped = false;

  private constructor(
    private readonly files: TlsFiles,
    private material: TlsMaterial,
    private readonly opts: ReloadingTlsOptions,
  ) {
    this.log = opts.logger;
    this.opts.metrics.serverCertificateExpiry.set(material.serverExpiresAt / 1000);
  }

  /** Reads and validates the files; throws (naming the file and problem) when they cannot serve. */
  static async load(files: TlsFiles, opts: ReloadingTlsOptions): Promise<ReloadingServerTls> {
    const material = await loadTlsMaterial(files);
    const t = new ReloadingServerTls(files, material, opts);
    t.warnIfExpired(material);
    return t;
  }

  current(): TlsMaterial {
    return this.material;
  }

  /**
   * Calls listener with every set taken into use from now on (the certificate, key and CA of one
   * set together, in one call); returns the unsubscribe.
   */
  onUpdate(listener: (material: TlsMaterial) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Starts following the files. */
  start(): void {
    const dirs = new Set(
      [this.files.certFile, this.files.keyFile, this.files.clientCAFile].map((f) => path.dirname(f)),
    );
    for (const dir of dirs) {
      try {
        const w = watch(dir, { persistent: false }, () => {
          this.scheduleReload();
        });
        w.on('error', (err) => {
          this.log.warn(
            'stopped watching a gRPC TLS directory; changes are still picked up within a minute',
            {
              dir,
              err,
            },
          );
          w.close();
        });
        this.watchers.push(w);
      } catch (err) {
        this.log.warn('cannot watch a gRPC TLS directory; changes are picked up within a minute', {
          dir,
          err,
        });
      }
    }
    this.scheduleRecheck();
  }

  stop(): void {
    this.stopped = true;
    for (const w of this.watchers) w.close();
    this.watchers.length = 0;
    this.debounce?.cancel();
    this.recheck?.cancel();
  }

  /** Re-reads the files now; reloads never overlap. */
  reload(): Promise<ReloadResult> {
    this.chain = this.chain.then(() => this.reloadOnce());
    return this.chain;
  }

  private scheduleReload(): void {
    if (this.stopped || this.debounce !== undefined) return;
    this.debounce = this.opts.clock.setTimeout(() => {
      this.debounce = undefined;
      void this.reload();
    }, DEBOUNCE_MS);
  }

  private scheduleRecheck(): void {
    if (this.stopped) return;
    this.recheck = this.opts.clock.setTimeout(() => {
      void this.reload().finally(() => {
        this.scheduleRecheck();
      });
    }, RECHECK_MS);
  }

  private async reloadOnce(): Promise<ReloadResult> {
    if (this.stopped) return 'unchanged';
    let next: TlsMaterial;
    try {
      const [cert, key, clientCA] = await Promise.all([
        readFile(this.files.certFile),
        readFile(this.files.keyFile),
        readFile(this.files.clientCAFile),
      ]);
      if (sameContent(this.material, cert, key, clientCA)) {
        this.lastProblem = undefined;
        return 'unchanged';
      }
      next = validateTlsMaterial(this.files, cert, key, clientCA);
    } catch (err) {
      const problem = errorMessage(err);
      if (problem !== this.lastProblem) {
        this.lastProblem = problem;
        this.opts.metrics.tlsReloads.inc({ result: 'failure' });
        this.log.warn('the gRPC TLS files changed but cannot be used; keeping the current certificate', {
          problem,
          ...describeTlsMaterial(this.material),
        });
      }
      return 'rejected';
    }
    const previous = this.material;
    this.material = next;
    this.lastProblem = undefined;
    for (const l of this.listeners) l(next);
    this.opts.metrics.tlsReloads.inc({ result: 'success' });
    this.opts.metrics.serverCertificateExpiry.set(next.serverExpiresAt / 1000);
    this.log.info('reloaded the gRPC TLS files: new connections use them', {
      changed: [
        ...(previous.cert.equals(next.cert) ? [] : ['certificate']),
        ...(previous.key.equals(next.key) ? [] : ['key']),
        ...(previous.clientCA.equals(next.clientCA) ? [] : ['client CA']),
      ],
      ...describeTlsMaterial(next),
    });
    this.warnIfExpired(next);
    return 'reloaded';
  }

  private warnIfExpired(m: TlsMaterial): void {
    if (m.serverExpiresAt <= this.opts.clock.now()) {
      this.log.warn('the gRPC server certificate has expired: clients will refuse the handshake', {
        serverCertificate: m.server,
      });
    }
  }
}
