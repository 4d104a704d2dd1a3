/** The standard gRPC health check (grpc.health.v1), as a client. */
import { credentials, makeGenericClientConstructor, type ServiceError } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';

const Health = makeGenericClientConstructor(healthService, 'Health');

/** The node's serving status: 'SERVING', 'NOT_SERVING', ... or 'unreachable (...)'. */
export async function healthStatus(address: string, timeoutMs = 2000, service = ''): Promise<string> {
  const client = new Health(address, credentials.createInsecure());
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
