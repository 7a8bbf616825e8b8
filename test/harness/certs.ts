/**
 * Test certificates for mutual TLS (the gRPC server and the cluster-autoscaler client): a CA, a
 * server certificate and a client certificate, ECDSA P-256, built as DER with node:crypto only
 * (no openssl binary). Test material: short-lived, keys on disk with mode 0600.
 */
import { createHash, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';
import { isIP } from 'node:net';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

// --- minimal DER encoding ------------------------------------------------------------------------

function derLength(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function tlv(tag: number, ...content: Buffer[]): Buffer {
  const body = Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), derLength(body.length), body]);
}

const seq = (...c: Buffer[]): Buffer => tlv(0x30, ...c);
const set = (...c: Buffer[]): Buffer => tlv(0x31, ...c);
const octets = (b: Buffer): Buffer => tlv(0x04, b);
const utf8 = (s: string): Buffer => tlv(0x0c, Buffer.from(s, 'utf8'));
const bool = (v: boolean): Buffer => tlv(0x01, Buffer.from([v ? 0xff : 0x00]));
const bitString = (bytes: Buffer, unusedBits = 0): Buffer => tlv(0x03, Buffer.from([unusedBits]), bytes);
const explicit = (n: number, c: Buffer): Buffer => tlv(0xa0 + n, c);

/** A non-negative INTEGER from big-endian bytes (a leading 0x00 keeps the sign bit clear). */
function integer(bytes: Buffer): Buffer {
  let b = bytes;
  while (b.length > 1 && b[0] === 0 && ((b[1] ?? 0) & 0x80) === 0) b = b.subarray(1);
  if (((b[0] ?? 0) & 0x80) !== 0) b = Buffer.concat([Buffer.from([0]), b]);
  return tlv(0x02, b);
}

function oid(dotted: string): Buffer {
  const arcs = dotted.split('.').map(Number);
  const [a = 0, b = 0, ...rest] = arcs;
  const out: number[] = [40 * a + b];
  for (const arc of rest) {
    const chunk: number[] = [arc & 0x7f];
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) chunk.unshift(0x80 | (v & 0x7f));
    out.push(...chunk);
  }
  return tlv(0x06, Buffer.from(out));
}

/** UTCTime before 2050, GeneralizedTime from 2050 on (RFC 5280 4.1.2.5). */
function time(d: Date): Buffer {
  const iso = d.toISOString(); // YYYY-MM-DDTHH:MM:SS.sssZ
  const digits = iso.slice(0, 19).replace(/[-T:]/g, '');
  return d.getUTCFullYear() < 2050
    ? tlv(0x17, Buffer.from(`${digits.slice(2)}Z`, 'ascii'))
    : tlv(0x18, Buffer.from(`${digits}Z`, 'ascii'));
}

function ipBytes(ip: string): Buffer {
  if (isIP(ip) === 4) return Buffer.from(ip.split('.').map(Number));
  // IPv6: expand "::" and write 8 groups of 16 bits.
  const [head = '', tail = ''] = ip.split('::');
  const h = head === '' ? [] : head.split(':');
  const t = ip.includes('::') ? (tail === '' ? [] : tail.split(':')) : [];
  const groups = ip.includes('::') ? [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t] : h;
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

const OID = {
  commonName: '2.5.4.3',
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  subjectKeyIdentifier: '2.5.29.14',
  keyUsage: '2.5.29.15',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  authorityKeyIdentifier: '2.5.29.35',
  extKeyUsage: '2.5.29.37',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
};

function extension(id: string, critical: boolean, value: Buffer): Buffer {
  return seq(oid(id), ...(critical ? [bool(true)] : []), octets(value));
}

function name(cn: string): Buffer {
  return seq(set(seq(oid(OID.commonName), utf8(cn))));
}

// --- certificates --------------------------------------------------------------------------------

export interface CertKey {
  /** PEM certificate. */
  certPem: string;
  /** PEM private key (PKCS#8). */
  keyPem: string;
}

/** A CA that can issue certificates. */
export interface CertificateAuthority extends CertKey {
  readonly commonName: string;
  readonly key: KeyObject;
  readonly keyId: Buffer;
}

export interface IssueOptions {
  commonName: string;
  /** DNS names for the subjectAltName extension. */
  dnsNames?: string[];
  /** IP addresses (v4 or v6) for the subjectAltName extension. */
  ips?: string[];
  /** Extended key usages; default both. */
  usages?: ('server' | 'client')[];
  /** Validity in days from now (default 7; starts one hour in the past against clock skew). */
  days?: number;
}

function newKey(): { privateKey: KeyObject; publicKey: KeyObject } {
  return generateKeyPairSync('ec', { namedCurve: 'P-256' });
}

function pem(label: string, der: Buffer): string {
  const b64 = der.toString('base64').replace(/(.{64})/g, '$1\n');
  return `-----BEGIN ${label}-----\n${b64.replace(/\n$/, '')}\n-----END ${label}-----\n`;
}

/** Key identifier: SHA-1 of the subjectPublicKey bits (RFC 5280 4.2.1.2, method 1). */
function keyIdentifier(publicKey: KeyObject): Buffer {
  const spki = publicKey.export({ type: 'spki', format: 'der' });
  // For a P-256 key the subjectPublicKey bits (the uncompressed point) are the last 65 bytes.
  return createHash('sha1')
    .update(spki.subarray(spki.length - 65))
    .digest();
}

function serial(): Buffer {
  const b = randomBytes(16);
  b[0] = ((b[0] ?? 0) & 0x7f) | 0x01; // positive and never zero
  return b;
}

function buildCertificate(opts: {
  subject: string;
  issuer: string;
  publicKey: KeyObject;
  signer: KeyObject;
  days: number;
  extensions: Buffer[];
}): Buffer {
  const now = Date.now();
  const algorithm = seq(oid(OID.ecdsaWithSha256));
  const tbs = seq(
    explicit(0, integer(Buffer.from([2]))), // v3
    integer(serial()),
    algorithm,
    name(opts.issuer),
    seq(time(new Date(now - 3600_000)), time(new Date(now + opts.days * 86_400_000))),
    name(opts.subject),
    opts.publicKey.export({ type: 'spki', format: 'der' }),
    tlv(0xa3, seq(...opts.extensions)),
  );
  const signature = sign('sha256', tbs, opts.signer); // DER ECDSA-Sig-Value
  return seq(tbs, algorithm, bitString(signature));
}

/** A self-signed CA certificate (basicConstraints CA:true, keyCertSign). */
export function createCA(commonName = 'mcm-test-ca', days = 7): CertificateAuthority {
  const { privateKey, publicKey } = newKey();
  const keyId = keyIdentifier(publicKey);
  const der = buildCertificate({
    subject: commonName,
    issuer: commonName,
    publicKey,
    signer: privateKey,
    days,
    extensions: [
      extension(OID.basicConstraints, true, seq(bool(true))),
      // digitalSignature (bit 0), keyCertSign (bit 5), cRLSign (bit 6): 1000 0110, 1 unused bit
      extension(OID.keyUsage, true, bitString(Buffer.from([0x86]), 1)),
      extension(OID.subjectKeyIdentifier, false, octets(keyId)),
    ],
  });
  return {
    commonName,
    key: privateKey,
    keyId,
    certPem: pem('CERTIFICATE', der),
    keyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
}

/** A leaf certificate signed by the CA, for TLS servers and/or clients. */
export function issueCertificate(ca: CertificateAuthority, opts: IssueOptions): CertKey {
  const { privateKey, publicKey } = newKey();
  const sans = [
    ...(opts.dnsNames ?? []).map((d) => tlv(0x82, Buffer.from(d, 'ascii'))),
    ...(opts.ips ?? []).map((ip) => tlv(0x87, ipBytes(ip))),
  ];
  const usages = opts.usages ?? ['server', 'client'];
  const extensions = [
    extension(OID.basicConstraints, true, seq()),
    // digitalSignature only (ECDSA keys sign; they do not encipher): bit 0, 7 unused bits
    extension(OID.keyUsage, true, bitString(Buffer.from([0x80]), 7)),
    extension(
      OID.extKeyUsage,
      false,
      seq(...usages.map((u) => oid(u === 'server' ? OID.serverAuth : OID.clientAuth))),
    ),
    extension(OID.subjectKeyIdentifier, false, octets(keyIdentifier(publicKey))),
    extension(OID.authorityKeyIdentifier, false, seq(tlv(0x80, ca.keyId))),
  ];
  if (sans.length > 0) extensions.push(extension(OID.subjectAltName, false, seq(...sans)));
  const der = buildCertificate({
    subject: opts.commonName,
    issuer: ca.commonName,
    publicKey,
    signer: ca.key,
    days: opts.days ?? 7,
    extensions,
  });
  return {
    certPem: pem('CERTIFICATE', der),
    keyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
}

/** CA, server certificate (127.0.0.1, ::1, localhost) and client certificate for gRPC mTLS. */
export interface MtlsBundle {
  ca: CertificateAuthority;
  server: CertKey;
  client: CertKey;
}

export function createMtlsBundle(
  opts: { serverName?: string; clientName?: string; dnsNames?: string[]; ips?: string[] } = {},
): MtlsBundle {
  const ca = createCA();
  return {
    ca,
    server: issueCertificate(ca, {
      commonName: opts.serverName ?? 'mcm-grpc-server',
      dnsNames: opts.dnsNames ?? ['localhost'],
      ips: opts.ips ?? ['127.0.0.1', '::1'],
      usages: ['server'],
    }),
    client: issueCertificate(ca, { commonName: opts.clientName ?? 'cluster-autoscaler', usages: ['client'] }),
  };
}

/** Paths of an MtlsBundle written to disk. */
export interface MtlsFiles {
  caFile: string;
  serverCertFile: string;
  serverKeyFile: string;
  clientCertFile: string;
  clientKeyFile: string;
}

/** Writes the bundle as PEM files into dir (created if needed; keys with mode 0600). */
export function writeMtlsBundle(dir: string, bundle: MtlsBundle): MtlsFiles {
  mkdirSync(dir, { recursive: true });
  const files: MtlsFiles = {
    caFile: path.join(dir, 'ca.crt'),
    serverCertFile: path.join(dir, 'server.crt'),
    serverKeyFile: path.join(dir, 'server.key'),
    clientCertFile: path.join(dir, 'client.crt'),
    clientKeyFile: path.join(dir, 'client.key'),
  };
  writeFileSync(files.caFile, bundle.ca.certPem);
  writeFileSync(files.serverCertFile, bundle.server.certPem);
  writeFileSync(files.serverKeyFile, bundle.server.keyPem, { mode: 0o600 });
  writeFileSync(files.clientCertFile, bundle.client.certPem);
  writeFileSync(files.clientKeyFile, bundle.client.keyPem, { mode: 0o600 });
  return files;
}
