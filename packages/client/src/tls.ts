/**
 * TLS for the SDK's connections: a CA to verify the brokers' certificates, and optionally
 * a client certificate and key (a broker with `tlsClientCerts` optional or required may
 * identify the client by it). Each is a file name (read once, at connect) or the PEM
 * content as a Buffer.
 */
import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import * as grpc from '@grpc/grpc-js';

export interface TlsOptions {
  /** CA certificates that verify the brokers' certificates (PEM); the system's roots when unset. */
  readonly ca?: string | Buffer;
  /** A client certificate (PEM), with `key`. */
  readonly cert?: string | Buffer;
  /** The client certificate's private key (PEM), with `cert`. */
  readonly key?: string | Buffer;
  /**
   * The name the brokers' certificates must carry, instead of the host of each address (e.g.
   * a certificate for `broker.example` reached at an IP address).
   */
  readonly serverName?: string;
}

function pem(what: string, value: string | Buffer | undefined): Buffer | null {
  if (value === undefined) return null;
  if (Buffer.isBuffer(value)) return value;
  try {
    return readFileSync(value);
  } catch (error) {
    throw new TypeError(`connect: tls.${what}: cannot read ${value}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** grpc-js channel credentials for `tls`. */
export function tlsCredentials(tls: TlsOptions): grpc.ChannelCredentials {
  const ca = pem('ca', tls.ca);
  const cert = pem('cert', tls.cert);
  const key = pem('key', tls.key);
  if ((cert === null) !== (key === null)) throw new TypeError('connect: tls.cert and tls.key go together: give both or neither');
  return grpc.credentials.createSsl(ca, key, cert);
}

/** Channel options for `tls` (the server name to check, when given). */
export function tlsChannelOptions(tls: TlsOptions | undefined): grpc.ChannelOptions {
  return tls?.serverName === undefined ? {} : { 'grpc.ssl_target_name_override': tls.serverName };
}

/**
 * Node's TLS options for `tls`, for the SDK's own HTTP/2 connections (h2-sessions.ts): the
 * same CA (Node's bundled roots when unset, as grpc-js's), certificate, key and server name.
 */
export function tlsConnectionOptions(tls: TlsOptions): ConnectionOptions {
  const ca = pem('ca', tls.ca);
  const cert = pem('cert', tls.cert);
  const key = pem('key', tls.key);
  if ((cert === null) !== (key === null)) throw new TypeError('connect: tls.cert and tls.key go together: give both or neither');
  return {
    ...(ca === null ? {} : { ca }),
    ...(cert === null || key === null ? {} : { cert, key }),
    ...(tls.serverName === undefined ? {} : { servername: tls.serverName }),
  };
}
