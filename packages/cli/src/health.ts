/** The standard gRPC health check (grpc.health.v1), as a client, in plaintext or TLS. */
import { readFileSync } from 'node:fs';
import { credentials, makeGenericClientConstructor, type ChannelCredentials, type ServiceError } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';

const Health = makeGenericClientConstructor(healthService, 'Health');

/** TLS for the check: the CA that verifies the node's certificate, and a client certificate and key when the node asks for one (files). */
export interface HealthTls {
  readonly caFile?: string;
  readonly certFile?: string;
  readonly keyFile?: string;
}

/** Channel credentials for `tls` (plaintext when null). Throws when a file cannot be read. */
export function healthCredentials(tls: HealthTls | null): ChannelCredentials {
  if (tls === null) return credentials.createInsecure();
  const read = (file: string | undefined): Buffer | null => (file === undefined ? null : readFileSync(file));
  if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) throw new Error('a client certificate needs its key: give --tls-cert and --tls-key together');
  return credentials.createSsl(read(tls.caFile), read(tls.keyFile), read(tls.certFile));
}

/** The node's serving status: 'SERVING', 'NOT_SERVING', ... or 'unreachable (...)'. */
export async function healthStatus(address: string, timeoutMs = 2000, service = '', tls: HealthTls | null = null): Promise<string> {
  const client = new Health(address, healthCredentials(tls));
  try {
    return await new Promise<string>((done) => {
      client.makeUnaryRequest(
        '/grpc.health.v1.Health/Check',
        (request: { service: string }) => Buffer.from(healthService.Check?.requestSerialize(request) ?? new Uint8Array()),
        (bytes: Buffer) => healthService.Check?.responseDeserialize(bytes) as { status: string | number },
        { service },
        { deadline: Date.now() + timeoutMs },
        (error: ServiceError | null, response?: { status: string | number }) => {
          if (error !== null || response === undefined) done(`unreachable (${error?.details ?? 'no response'})`);
          else done(response.status === 1 ? 'SERVING' : String(response.status));
        },
      );
    });
  } finally {
    client.close();
  }
}
