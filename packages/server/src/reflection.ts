/**
 * gRPC server reflection (v1 and v1alpha, @grpc/reflection) over the descriptors buf compiled
 * from proto/ at build time (`@quorumq/proto`'s descriptorSetPath), not over descriptors that
 * protobufjs rebuilds from the .proto files: those are not well formed (map entry types are
 * misnamed), and tools such as `buf curl --reflect` or grpcurl then cannot find the services.
 */
import type { Server } from '@grpc/grpc-js';
import type { PackageDefinition } from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { Reader, descriptorSetPath } from '@quorumq/proto';
import { readFileSync } from 'node:fs';

/** The encoded FileDescriptorProtos of a FileDescriptorSet (its field 1), each as it was compiled. */
export function fileDescriptorProtos(descriptorSet: Uint8Array): Buffer[] {
  const reader = Reader.create(descriptorSet);
  const files: Buffer[] = [];
  while (reader.pos < reader.len) {
    const tag = reader.uint32();
    if (tag >>> 3 === 1 && (tag & 7) === 2) files.push(Buffer.from(reader.bytes()));
    else reader.skipType(tag & 7);
  }
  return files;
}

/**
 * Adds the reflection services for every service in the descriptor set (the quorumq services
 * and grpc.health.v1.Health). @grpc/reflection reads only the `fileDescriptorProtos` of a
 * package definition's entries, so one entry per compiled file hands it the files unchanged.
 */
export function addReflection(server: Pick<Server, 'addService'>, descriptorSet: Uint8Array = readDescriptorSet()): void {
  const definition = Object.fromEntries(
    fileDescriptorProtos(descriptorSet).map((file, i) => [`file ${i}`, { format: 'Protocol Buffer 3 FileDescriptorProto', type: {}, fileDescriptorProtos: [file] }]),
  ) as unknown as PackageDefinition;
  new ReflectionService(definition).addToServer(server);
}

function readDescriptorSet(): Buffer {
  try {
    return readFileSync(descriptorSetPath);
  } catch (error) {
    throw new Error(`server reflection needs ${descriptorSetPath.pathname}, made by \`npm run build\`: ${error instanceof Error ? error.message : String(error)}`);
  }
}
