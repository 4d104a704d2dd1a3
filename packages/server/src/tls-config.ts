/**
 * The TLS options of a node's configuration, checked at start: the files must be readable,
 * hold a certificate and a key that belong together, and a CA file at least one certificate,
 * so that a mistake stops the node with a message naming the option (exit 2) instead of a
 * listener that refuses every handshake. A node's peer certificate must also name the node
 * (its CN or a DNS subject alternative name is the node id): the other nodes check that.
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';

import { ConfigError } from './config-error.js';
import { x509Names } from './tls-identity.js';

/** Client certificates on the client listener: not asked for, verified when presented, or required. */
export type ClientCertificateMode = 'none' | 'optional' | 'required';
export const CLIENT_CERTIFICATE_MODES: readonly ClientCertificateMode[] = ['none', 'optional', 'required'];

export interface ClientTlsConfig {
  readonly certFile: string;
  readonly keyFile: string;
  /** CA certificates that verify client certificates (with `clientCerts` optional or required). */
  readonly caFile: string | null;
  readonly clientCerts: ClientCertificateMode;
}

export interface PeerTlsConfig {
  /** This node's certificate (presented to peers as server and as client) and key. */
  readonly certFile: string;
  readonly keyFile: string;
  /** The cluster CA: verifies every other node's certificate. */
  readonly caFile: string;
}

type Raw = Record<string, unknown>;

function option(raw: Raw, key: string): string | null {
  const value = raw[key];
  if (value === undefined || value === null || value === '') return null;
  if (typeof value !== 'string') throw new ConfigError(`${key}: expected a file name, got ${JSON.stringify(value)}`);
  return value;
}

function read(key: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    throw new ConfigError(`${key}: cannot read ${file}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** Every certificate of a PEM file (a CA file may hold several). */
function certificates(key: string, file: string): X509Certificate[] {
  const pem = read(key, file).toString('utf8');
  const blocks = pem.match(PEM_CERTIFICATE) ?? [];
  if (blocks.length === 0) throw new ConfigError(`${key}: ${file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`);
  return blocks.map((block) => {
    try {
      return new X509Certificate(block);
    } catch (error) {
      throw new ConfigError(`${key}: ${file}: not a readable certificate: ${error instanceof Error ? error.message : String(error)}`);
    }
  });
}

/** The certificate file's first certificate (the leaf), checked against its key. */
function identity(certKey: string, certFile: string, keyKey: string, keyFile: string): X509Certificate {
  const cert = certificates(certKey, certFile)[0] as X509Certificate;
  let key;
  try {
    key = createPrivateKey(read(keyKey, keyFile));
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    throw new ConfigError(`${keyKey}: ${keyFile}: not a readable private key (PEM, unencrypted): ${error instanceof Error ? error.message : String(error)}`);
  }
  if (!cert.checkPrivateKey(key)) throw new ConfigError(`${keyKey}: the key in ${keyFile} does not belong to the certificate in ${certFile} (${certKey})`);
  return cert;
}

/** `tlsCertFile`, `tlsKeyFile`, `tlsCaFile`, `tlsClientCerts`: TLS on the client listener, or null. */
export function clientTlsConfig(raw: Raw): ClientTlsConfig | null {
  const certFile = option(raw, 'tlsCertFile');
  const keyFile = option(raw, 'tlsKeyFile');
  const caFile = option(raw, 'tlsCaFile');
  const modeText = option(raw, 'tlsClientCerts');
  if (modeText !== null && !(CLIENT_CERTIFICATE_MODES as readonly string[]).includes(modeText)) {
    throw new ConfigError(`tlsClientCerts: expected one of ${CLIENT_CERTIFICATE_MODES.join(', ')}, got ${JSON.stringify(modeText)}`);
  }
  const clientCerts = (modeText ?? 'none') as ClientCertificateMode;
  if (certFile === null && keyFile === null) {
    if (caFile !== null || modeText !== null) throw new ConfigError('tlsCaFile / tlsClientCerts need TLS on the client listener: set tlsCertFile and tlsKeyFile too');
    return null;
  }
  if (certFile === null || keyFile === null) throw new ConfigError('TLS for clients needs both tlsCertFile and tlsKeyFile (QUORUMQ_TLS_CERT_FILE, QUORUMQ_TLS_KEY_FILE)');
  identity('tlsCertFile', certFile, 'tlsKeyFile', keyFile);
  if (clientCerts === 'none' && caFile !== null) {
    throw new ConfigError('tlsCaFile verifies client certificates: set tlsClientCerts to optional or required (QUORUMQ_TLS_CLIENT_CERTS), or remove tlsCaFile');
  }
  if (clientCerts !== 'none' && caFile === null) {
    throw new ConfigError(`tlsClientCerts ${clientCerts} needs tlsCaFile (QUORUMQ_TLS_CA_FILE): the CA certificates that verify client certificates`);
  }
  if (caFile !== null) certificates('tlsCaFile', caFile);
  return { certFile, keyFile, caFile, clientCerts };
}

/** `peerTlsCertFile`, `peerTlsKeyFile`, `peerTlsCaFile`: mutual TLS between the nodes, or null. */
export function peerTlsConfig(raw: Raw, nodeId: string): PeerTlsConfig | null {
  const certFile = option(raw, 'peerTlsCertFile');
  const keyFile = option(raw, 'peerTlsKeyFile');
  const caFile = option(raw, 'peerTlsCaFile');
  if (certFile === null && keyFile === null && caFile === null) return null;
  if (certFile === null || keyFile === null || caFile === null) {
    throw new ConfigError(
      'mutual TLS between the nodes needs all three of peerTlsCertFile, peerTlsKeyFile and peerTlsCaFile ' +
        '(QUORUMQ_PEER_TLS_CERT_FILE, QUORUMQ_PEER_TLS_KEY_FILE, QUORUMQ_PEER_TLS_CA_FILE: the node\'s certificate and key, and the cluster CA)',
    );
  }
  const cert = identity('peerTlsCertFile', certFile, 'peerTlsKeyFile', keyFile);
  const names = x509Names(cert);
  if (!names.includes(nodeId)) {
    throw new ConfigError(
      `peerTlsCertFile: the certificate in ${certFile} names ${names.length === 0 ? 'nobody' : names.join(', ')}, not this node (${nodeId}): ` +
        'a node\'s peer certificate must have the node id as its CN or as a DNS subject alternative name (the other nodes check it)',
    );
  }
  certificates('peerTlsCaFile', caFile);
  return { certFile, keyFile, caFile };
}
