/**
 * The credentials of the node's listeners and of its channels to peers, from the TLS
 * configuration (tls-config.ts), on certificate files read again every `tlsRefreshMs`
 * (certificate-files.ts).
 *
 * - Client listener: plaintext, or TLS with the node's certificate; client certificates not
 *   asked for (`none`), asked for and verified against `tlsCaFile` but not required
 *   (`optional`: a connection without one, or with one the CA does not verify, is served,
 *   and its calls carry no peer certificate), or required (`required`: the handshake fails
 *   without a certificate the CA verifies).
 * - Peer listener: plaintext, or mutual TLS: a client certificate the cluster CA verifies is
 *   required at the handshake (which node it names is checked per call: peer-auth.ts).
 * - Peer channels: plaintext, or TLS presenting this node's certificate and accepting only
 *   a server certificate the cluster CA verifies that names the node dialled (its id as CN
 *   or DNS name), whatever the address (an IP address works).
 */
import { ChannelCredentials, ServerCredentials, credentials, experimental, type ChannelOptions } from '@grpc/grpc-js';
import type { ConnectionOptions, PeerCertificate } from 'node:tls';

import type { NodeConfig } from './config.js';
import { CertificateFiles, type CertificateLog } from './certificate-files.js';
import { certificateNames } from './tls-identity.js';

/*
 * grpc-js 1.14's createCertificateProviderServerCredentials hands its first argument to the
 * server credentials as the identity (certificate and key) provider and its second as the
 * CA provider, whatever its declared parameter names say; `identity` goes first here. Where
 * both are needed one provider holds all three files, so the order cannot matter there.
 */
function serverCredentials(identity: CertificateFiles, ca: CertificateFiles | null, requireClientCertificate: boolean): ServerCredentials {
  return experimental.createCertificateProviderServerCredentials(identity, ca, requireClientCertificate);
}

export function clientListenerCredentials(config: Pick<NodeConfig, 'tls' | 'tlsRefreshMs'>, log: CertificateLog): ServerCredentials {
  const tls = config.tls;
  if (tls === null) return ServerCredentials.createInsecure();
  const withCa = tls.clientCerts !== 'none';
  const files = new CertificateFiles({ certFile: tls.certFile, keyFile: tls.keyFile, caFile: withCa ? tls.caFile : null }, config.tlsRefreshMs, 'client listener', log);
  return serverCredentials(files, withCa ? files : null, tls.clientCerts === 'required');
}

/** The peer side of a node: its listener's credentials and those of its channels to each peer. */
export class PeerCredentials {
  private readonly files: CertificateFiles | null;

  constructor(config: Pick<NodeConfig, 'peerTls' | 'tlsRefreshMs'>, log: CertificateLog) {
    const tls = config.peerTls;
    this.files = tls === null ? null : new CertificateFiles({ certFile: tls.certFile, keyFile: tls.keyFile, caFile: tls.caFile }, config.tlsRefreshMs, 'peer', log);
  }

  /** Whether peers talk mutual TLS. */
  get mutualTls(): boolean {
    return this.files !== null;
  }

  listener(): ServerCredentials {
    return this.files === null ? ServerCredentials.createInsecure() : serverCredentials(this.files, this.files, true);
  }

  /** Credentials of a channel to node `nodeId`. */
  channel(nodeId: string): ChannelCredentials {
    if (this.files === null) return credentials.createInsecure();
    return experimental.createCertificateProviderChannelCredentials(this.files, this.files, {
      checkServerIdentity: (_host: string, cert: PeerCertificate) => {
        const names = certificateNames(cert);
        if (names.includes(nodeId)) return undefined;
        return new Error(`the peer presented a certificate for ${names.length === 0 ? 'nobody' : names.join(', ')}, not node ${nodeId}`);
      },
    });
  }

  /**
   * TLS options of a connection this node dials to node `nodeId` itself (bare-grpc-stream.ts),
   * the same checks as `channel`: the certificates read last, the node id as the name asked
   * for (SNI) and as the one the server's certificate must name. Null: plaintext.
   */
  dialTls(nodeId: string): ConnectionOptions | null {
    if (this.files === null) return null;
    const { ca, certificate, privateKey } = this.files.current();
    return {
      ca,
      cert: certificate,
      key: privateKey,
      servername: nodeId,
      checkServerIdentity: (_host: string, cert: PeerCertificate) => {
        const names = certificateNames(cert);
        if (names.includes(nodeId)) return undefined;
        return new Error(`the peer presented a certificate for ${names.length === 0 ? 'nobody' : names.join(', ')}, not node ${nodeId}`);
      },
    };
  }

  /**
   * Channel options for node `nodeId`: with TLS, the node id is the name the handshake asks
   * for (SNI), not the address's host, which may be an IP address.
   */
  channelOptions(nodeId: string): ChannelOptions {
    return this.files === null ? {} : { 'grpc.ssl_target_name_override': nodeId };
  }
}
