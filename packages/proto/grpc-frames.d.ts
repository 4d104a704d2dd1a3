/** The bytes of gRPC's prefix before each message. */
export declare const GRPC_FRAME_HEADER_BYTES: 5;

/** `bytes` with gRPC's prefix (uncompressed), in one new buffer. */
export declare function grpcFrame(bytes: Uint8Array): Buffer;

/** A status a reader ends a stream with. */
export interface FrameProblem {
  readonly code: number;
  readonly details: string;
}

/**
 * Inflates a compressed message to at most `bytesMax` bytes (the stream's `grpc-encoding`);
 * null when the stream named none (a compressed message is then a problem).
 */
export type Inflate = ((bytes: Buffer, bytesMax: number) => Buffer) | null;

/**
 * Splits the DATA of a stream into gRPC messages. A message split across chunks is joined
 * once it is whole; one over `bytesMax`, a compressed one without `inflate`, or one that does
 * not inflate is a problem: `onProblem` gets its status and nothing more is read.
 */
export declare class GrpcMessageReader {
  constructor(bytesMax: number, onMessage: (message: Buffer) => void, onProblem: (status: FrameProblem) => void, inflate?: Inflate);
  push(chunk: Buffer): void;
}
