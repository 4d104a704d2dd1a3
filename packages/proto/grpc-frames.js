// gRPC's message framing over HTTP/2 DATA (a 1-byte compressed flag, a 4-byte big-endian
// length, the message), read and written by hand where the node and the SDK use node:http2
// directly instead of grpc-js: the node's Raft stream and served client streams, the SDK's
// publish and consume streams. Hand-written, like errors.js; both import it from
// '@quorumq/proto/grpc-frames', so the reader is written once.
import { status as Status } from '@grpc/grpc-js';

/** The bytes of gRPC's prefix before each message. */
export const GRPC_FRAME_HEADER_BYTES = 5;

/** `bytes` with gRPC's prefix (uncompressed), in one new buffer. */
export function grpcFrame(bytes) {
  const framed = Buffer.allocUnsafe(GRPC_FRAME_HEADER_BYTES + bytes.length);
  framed[0] = 0;
  framed.writeUInt32BE(bytes.length, 1);
  framed.set(bytes, GRPC_FRAME_HEADER_BYTES);
  return framed;
}

/**
 * Splits the DATA of a stream into gRPC messages. A message split across chunks is joined
 * once it is whole (a message within one chunk is a view of it, not a copy); one over
 * `bytesMax` (inflated or not), a compressed one when the stream named no encoding, or one
 * that does not inflate is a problem: `onProblem` gets its status and nothing more is read.
 */
export class GrpcMessageReader {
  #pending = [];
  #pendingBytes = 0;
  #need = GRPC_FRAME_HEADER_BYTES;
  #inBody = false;
  #bodyBytes = 0;
  #compressed = false;
  #stopped = false;

  constructor(bytesMax, onMessage, onProblem, inflate = null) {
    this.bytesMax = bytesMax;
    this.onMessage = onMessage;
    this.onProblem = onProblem;
    this.inflate = inflate;
  }

  push(chunk) {
    let at = 0;
    while (at < chunk.length && !this.#stopped) {
      const take = Math.min(this.#need - this.#pendingBytes, chunk.length - at);
      if (this.#pendingBytes === 0 && take === this.#need) {
        // The common case: the whole header or body inside this chunk, no copy.
        if (!this.#complete(chunk.subarray(at, at + take))) return this.#stop();
      } else {
        this.#pending.push(chunk.subarray(at, at + take));
        this.#pendingBytes += take;
        if (this.#pendingBytes === this.#need) {
          const whole = Buffer.concat(this.#pending, this.#pendingBytes);
          this.#pending = [];
          this.#pendingBytes = 0;
          if (!this.#complete(whole)) return this.#stop();
        }
      }
      at += take;
    }
  }

  #stop() {
    this.#stopped = true;
    this.#pending = [];
  }

  /** One header or body is whole; false when the stream must end. */
  #complete(bytes) {
    if (this.#inBody) {
      this.#inBody = false;
      this.#need = GRPC_FRAME_HEADER_BYTES;
      return this.#deliver(bytes);
    }
    this.#compressed = bytes[0] !== 0;
    if (this.#compressed && this.inflate === null) {
      this.onProblem({ code: Status.UNIMPLEMENTED, details: 'compressed messages are not accepted on this stream' });
      return false;
    }
    this.#bodyBytes = bytes.readUInt32BE(1);
    if (this.#bodyBytes > this.bytesMax) {
      this.onProblem({ code: Status.RESOURCE_EXHAUSTED, details: `message of ${this.#bodyBytes} bytes is over the ${this.bytesMax}-byte limit` });
      return false;
    }
    if (this.#bodyBytes === 0) return this.#deliver(Buffer.alloc(0));
    this.#inBody = true;
    this.#need = this.#bodyBytes;
    return true;
  }

  /** A whole message, inflated when its flag says so. */
  #deliver(bytes) {
    if (!this.#compressed || this.inflate === null) {
      this.onMessage(bytes);
      return true;
    }
    let inflated;
    try {
      inflated = this.inflate(bytes, this.bytesMax);
    } catch (error) {
      const tooLarge = error?.code === 'ERR_BUFFER_TOO_LARGE';
      this.onProblem(
        tooLarge
          ? { code: Status.RESOURCE_EXHAUSTED, details: `message inflates to over the ${this.bytesMax}-byte limit` }
          : { code: Status.INTERNAL, details: `compressed message does not inflate: ${error instanceof Error ? error.message : String(error)}` },
      );
      return false;
    }
    this.onMessage(inflated);
    return true;
  }
}
