/**
 * Certificates for local TLS clusters (LocalCluster's `tls`, the tests), made with the
 * `openssl` command: a CA, a certificate per node (CN and DNS name the node id, plus
 * DNS:localhost and IP:127.0.0.1, for both server and client use: a node presents it on
 * its listeners and to the peers it dials), and client certificates. EC P-256 keys,
 * unencrypted PEM. `cluster/make-certs.sh` makes the same for the compose cluster.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface CertificateFilePair {
  readonly cert: string;
  readonly key: string;
}

export interface CertificateAuthority extends CertificateFilePair {
  readonly dir: string;
}

function openssl(args: readonly string[]): void {
  try {
    execFileSync('openssl', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    const stderr = (error as { stderr?: Buffer }).stderr?.toString() ?? '';
    throw new Error(`openssl ${args[0]} failed: ${stderr || (error instanceof Error ? error.message : String(error))}`);
  }
}

const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** A self-signed CA in `dir` (`<name>.crt`, `<name>.key`). */
export function makeCertificateAuthority(dir: string, name = 'ca', subject = 'quorumq test CA'): CertificateAuthority {
  mkdirSync(dir, { recursive: true });
  const cert = join(dir, `${name}.crt`);
  const key = join(dir, `${name}.key`);
  openssl([
    'req', '-x509', ...EC_KEY, '-keyout', key, '-out', cert, '-days', '3650', '-subj', `/CN=${subject}`,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  return { dir, cert, key };
}

export interface LeafOptions {
  /** DNS subject alternative names (none by default). */
  readonly dnsNames?: readonly string[];
  /** IP subject alternative names. */
  readonly ips?: readonly string[];
  /** Days the certificate is valid. */
  readonly days?: number;
}

/** A certificate for `commonName` signed by `ca`, in `dir` (`<file>.crt`, `<file>.key`), for server and client use. */
export function makeCertificate(ca: CertificateAuthority, dir: string, file: string, commonName: string, options: LeafOptions = {}): CertificateFilePair {
  mkdirSync(dir, { recursive: true });
  const cert = join(dir, `${file}.crt`);
  const key = join(dir, `${file}.key`);
  const csr = join(dir, `${file}.csr`);
  const ext = join(dir, `${file}.ext`);
  const names = [...(options.dnsNames ?? []).map((n) => `DNS:${n}`), ...(options.ips ?? []).map((ip) => `IP:${ip}`)];
  writeFileSync(
    ext,
    ['basicConstraints=CA:FALSE', 'keyUsage=critical,digitalSignature,keyEncipherment', 'extendedKeyUsage=serverAuth,clientAuth', ...(names.length > 0 ? [`subjectAltName=${names.join(',')}`] : [])].join('\n') + '\n',
  );
  openssl(['req', '-new', ...EC_KEY, '-keyout', key, '-out', csr, '-subj', `/CN=${commonName}`]);
  openssl(['x509', '-req', '-in', csr, '-CA', ca.cert, '-CAkey', ca.key, '-CAcreateserial', '-out', cert, '-days', String(options.days ?? 825), '-extfile', ext]);
  rmSync(csr, { force: true });
  rmSync(ext, { force: true });
  return { cert, key };
}

/** A node's certificate: CN and DNS name the node id, DNS:localhost, IP:127.0.0.1. */
export function makeNodeCertificate(ca: CertificateAuthority, dir: string, nodeId: string, file = nodeId): CertificateFilePair {
  return makeCertificate(ca, dir, file, nodeId, { dnsNames: [nodeId, 'localhost'], ips: ['127.0.0.1'] });
}

export interface ClusterCertificates {
  readonly ca: CertificateAuthority;
  readonly nodes: ReadonlyMap<string, CertificateFilePair>;
  /** A client certificate (CN `client`). */
  readonly client: CertificateFilePair;
}

/** A CA, one certificate per node and a client certificate, all in `dir`. */
export function makeClusterCertificates(dir: string, nodeIds: readonly string[]): ClusterCertificates {
  const ca = makeCertificateAuthority(dir);
  const nodes = new Map(nodeIds.map((id) => [id, makeNodeCertificate(ca, dir, id)]));
  const client = makeCertificate(ca, dir, 'client', 'client');
  return { ca, nodes, client };
}
