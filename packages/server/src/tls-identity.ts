/**
 * Who a verified TLS certificate names: its subject's common name (CN) and its DNS subject
 * alternative names. A client's identity for handlers (`clientCertificateIdentity`), a
 * peer node's id (peer-auth.ts, and the check of the certificate a dialled peer shows).
 *
 * grpc-js hands a handler the peer certificate (`call.getAuthContext().sslPeerCertificate`)
 * only when the TLS handshake verified it against the listener's CA: a connection without a
 * certificate, or with one the CA does not verify (possible when client certificates are
 * optional), has none, and so no identity.
 */
import type { X509Certificate } from 'node:crypto';
import type { PeerCertificate } from 'node:tls';

/** The DNS names of a subjectAltName text as Node writes it: `DNS:n1, DNS:localhost, IP Address:127.0.0.1`. */
export function dnsNames(subjectAltName: string | undefined): string[] {
  if (subjectAltName === undefined || subjectAltName === '') return [];
  return subjectAltName
    .split(/,\s*/)
    .filter((entry) => entry.startsWith('DNS:'))
    .map((entry) => entry.slice(4))
    .filter((name) => name !== '');
}

function commonNameOf(cert: PeerCertificate): string | null {
  const cn: unknown = cert.subject?.CN;
  const first = Array.isArray(cn) ? cn[0] : cn;
  return typeof first === 'string' && first !== '' ? first : null;
}

/** CN first (when there is one), then the DNS names. */
export function certificateNames(cert: PeerCertificate): string[] {
  const cn = commonNameOf(cert);
  return [...(cn === null ? [] : [cn]), ...dnsNames(cert.subjectaltname)];
}

/** The same names from a certificate parsed with node:crypto (a file the node reads). */
export function x509Names(cert: X509Certificate): string[] {
  const cn = /^CN=(.*)$/m.exec(cert.subject)?.[1];
  return [...(cn === undefined || cn === '' ? [] : [cn]), ...dnsNames(cert.subjectAltName)];
}

/** What grpc-js gives a handler about the connection a call came on. */
export interface CallWithAuthContext {
  getAuthContext(): { sslPeerCertificate?: PeerCertificate };
}

/** The verified peer certificate of a call, or null (plaintext, no certificate, or not verified). */
export function verifiedPeerCertificate(call: CallWithAuthContext): PeerCertificate | null {
  const cert = call.getAuthContext().sslPeerCertificate;
  return cert === undefined || cert === null || cert.raw === undefined ? null : cert;
}

/**
 * The identity a verified client certificate gives the caller: its CN, else its first DNS
 * subject alternative name; null without a verified certificate or with neither.
 */
export function clientCertificateIdentity(call: CallWithAuthContext): string | null {
  const cert = verifiedPeerCertificate(call);
  if (cert === null) return null;
  return certificateNames(cert)[0] ?? null;
}
