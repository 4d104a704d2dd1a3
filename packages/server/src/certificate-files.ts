/**
 * Certificates, keys and CA certificates read from files, and read again every
 * `refreshMs` (grpc-js's FileWatcherCertificateProvider): a listener or a peer channel using
 * them takes up changed files without a restart (new connections get the new certificate;
 * open ones keep theirs).
 *
 * What a refresh reads is checked before it is used: a certificate with a key that does not
 * match it (one file replaced before the other), an unreadable or missing file, or text that
 * is no certificate keeps the last good ones, with a warning (once per problem until a good
 * read). grpc-js alone would drop every new connection while the files are wrong.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import { experimental } from '@grpc/grpc-js';

type CaUpdate = experimental.CaCertificateUpdate;
type IdentityUpdate = experimental.IdentityCertificateUpdate;
type CaListener = experimental.CaCertificateUpdateListener;
type IdentityListener = experimental.IdentityCertificateUpdateListener;

export interface CertificateFileNames {
  readonly certFile?: string | null;
  readonly keyFile?: string | null;
  readonly caFile?: string | null;
}

export interface CertificateLog {
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
}

function describe(certificate: Buffer): object {
  const cert = new X509Certificate(certificate);
  return { subject: cert.subject.replace(/\n/g, ', '), validTo: cert.validTo, fingerprint256: cert.fingerprint256 };
}

export class CertificateFiles implements experimental.CertificateProvider {
  private readonly inner: experimental.FileWatcherCertificateProvider;
  private ca: CaUpdate | undefined;
  private identity: IdentityUpdate | undefined;
  private readonly caListeners = new Set<CaListener>();
  private readonly identityListeners = new Set<IdentityListener>();
  /** The last problem warned about, per kind (one warning until it changes or clears). */
  private readonly warned = new Map<'ca' | 'identity', string>();

  constructor(
    private readonly files: CertificateFileNames,
    refreshMs: number,
    /** Names the files in log lines: "client listener", "peer". */
    private readonly what: string,
    private readonly log: CertificateLog,
  ) {
    this.inner = new experimental.FileWatcherCertificateProvider({
      ...(files.certFile ? { certificateFile: files.certFile, privateKeyFile: files.keyFile ?? undefined } : {}),
      ...(files.caFile ? { caCertificateFile: files.caFile } : {}),
      refreshIntervalMs: refreshMs,
    });
    // Read now (the configuration checked them), so the first connections need not wait.
    if (files.certFile && files.keyFile) this.identity = { certificate: readFileSync(files.certFile), privateKey: readFileSync(files.keyFile) };
    if (files.caFile) this.ca = { caCertificate: readFileSync(files.caFile) };
  }

  private problem(kind: 'ca' | 'identity', problem: string): void {
    if (this.warned.get(kind) === problem) return;
    this.warned.set(kind, problem);
    const files = kind === 'ca' ? { caFile: this.files.caFile } : { certFile: this.files.certFile, keyFile: this.files.keyFile };
    this.log.warn({ ...files, problem }, `${this.what} TLS: the files read at a refresh cannot be used; the certificates read before stay in use`);
  }

  private readonly onInnerCa = (update: CaUpdate | null): void => {
    if (update === null) return this.problem('ca', 'the CA file cannot be read');
    try {
      new X509Certificate(update.caCertificate);
    } catch (error) {
      return this.problem('ca', `not a certificate: ${error instanceof Error ? error.message : String(error)}`);
    }
    this.warned.delete('ca');
    if (this.ca !== undefined && this.ca.caCertificate.equals(update.caCertificate)) return;
    this.ca = update;
    this.log.info({ caFile: this.files.caFile, ...describe(update.caCertificate) }, `${this.what} TLS: CA certificates reloaded`);
    for (const listener of this.caListeners) listener(update);
  };

  private readonly onInnerIdentity = (update: IdentityUpdate | null): void => {
    if (update === null) return this.problem('identity', 'the certificate or key file cannot be read');
    try {
      createSecureContext({ cert: update.certificate, key: update.privateKey });
      new X509Certificate(update.certificate);
    } catch (error) {
      return this.problem('identity', `certificate and key cannot be used together: ${error instanceof Error ? error.message : String(error)}`);
    }
    this.warned.delete('identity');
    const current = this.identity;
    if (current !== undefined && current.certificate.equals(update.certificate) && current.privateKey.equals(update.privateKey)) return;
    this.identity = update;
    this.log.info({ certFile: this.files.certFile, ...describe(update.certificate) }, `${this.what} TLS: certificate reloaded`);
    for (const listener of this.identityListeners) listener(update);
  };

  /**
   * The certificates read last, for a connection made without grpc-js (bare-grpc-stream.ts).
   * They are read again while a grpc-js listener or channel uses this provider (the peer
   * listener does, for as long as the node runs).
   */
  current(): { ca?: Buffer; certificate?: Buffer; privateKey?: Buffer } {
    return { ca: this.ca?.caCertificate, certificate: this.identity?.certificate, privateKey: this.identity?.privateKey };
  }

  addCaCertificateListener(listener: CaListener): void {
    this.caListeners.add(listener);
    if (this.caListeners.size === 1) this.inner.addCaCertificateListener(this.onInnerCa);
    const current = this.ca;
    if (current !== undefined) process.nextTick(listener, current);
  }

  removeCaCertificateListener(listener: CaListener): void {
    this.caListeners.delete(listener);
    if (this.caListeners.size === 0) this.inner.removeCaCertificateListener(this.onInnerCa);
  }

  addIdentityCertificateListener(listener: IdentityListener): void {
    this.identityListeners.add(listener);
    if (this.identityListeners.size === 1) this.inner.addIdentityCertificateListener(this.onInnerIdentity);
    const current = this.identity;
    if (current !== undefined) process.nextTick(listener, current);
  }

  removeIdentityCertificateListener(listener: IdentityListener): void {
    this.identityListeners.delete(listener);
    if (this.identityListeners.size === 0) this.inner.removeIdentityCertificateListener(this.onInnerIdentity);
  }
}
