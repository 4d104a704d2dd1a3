/**
 * Requests that cannot be read are the client's fault, and say so. grpc-js answers a
 * deserializer that throws with INTERNAL "Error deserializing request"; instead, every Broker
 * method's deserializer is wrapped (`lenient`) so that a failure becomes an UnreadableRequest
 * holding the status to answer: INVALID_ARGUMENT with what was wrong for malformed bytes, or
 * the BrokerError a bounded decoder threw (a limit of request-limits.ts). The server
 * interceptor `refuseUnreadable` then answers it:
 *
 * - a unary or server-streaming call ends with that status; the handler never runs;
 * - on a client stream the handler sees the end of its input instead (the unreadable message
 *   and whatever follows are not read), finishes what it has in flight (a publish stream sends
 *   the outcomes of its earlier publishes), and the call ends with the refusal's status rather
 *   than OK.
 */
import {
  ServerInterceptingCall,
  ServerListenerBuilder,
  status as Status,
  type ServerInterceptingCallInterface,
  type ServerInterceptor,
} from '@grpc/grpc-js';

import { BrokerError, Reason, invalidArgument } from './errors.js';

type PartialStatusObject = Parameters<ServerInterceptingCallInterface['sendStatus']>[0];
type InterceptingServerListener = Parameters<ServerInterceptingCallInterface['start']>[0];

/** What a lenient deserializer returns for bytes it could not read. */
export class UnreadableRequest {
  constructor(readonly error: BrokerError) {}

  get status(): PartialStatusObject {
    const { code, details, metadata } = this.error.toServiceError();
    return { code: code ?? Status.INVALID_ARGUMENT, details: details ?? 'unreadable request', metadata: metadata ?? null };
  }
}

/** Wraps a grpc-js deserializer: a failure becomes an UnreadableRequest (see above). */
export function lenient<T>(method: string, deserialize: (bytes: Buffer) => T): (bytes: Buffer) => T | UnreadableRequest {
  return (bytes) => {
    try {
      return deserialize(bytes);
    } catch (error) {
      if (error instanceof BrokerError) return new UnreadableRequest(error);
      const why = error instanceof Error ? error.message : String(error);
      return new UnreadableRequest(invalidArgument(`malformed ${method} request (${bytes.byteLength} bytes): ${why}`, Reason.MALFORMED_REQUEST));
    }
  };
}

/** Answers the UnreadableRequests of every call (others pass through untouched). */
export const refuseUnreadable: ServerInterceptor = (method, call) => new RefusingCall(call, method.requestStream);

class RefusingCall extends ServerInterceptingCall {
  /** The handler's listener (to end its input on a client stream). */
  private handler: InterceptingServerListener | null = null;
  private refusal: PartialStatusObject | null = null;

  constructor(next: ServerInterceptingCallInterface, requestStream: boolean) {
    const self: { call?: RefusingCall } = {};
    super(next, {
      start: (startNext) =>
        startNext(
          new ServerListenerBuilder()
            .withOnReceiveMessage((message, pass) => {
              if (message instanceof UnreadableRequest) self.call!.refuse(message, requestStream);
              else pass(message);
            })
            .build(),
        ),
      sendStatus: (status, pass) => pass(self.call!.refusal !== null && status.code === Status.OK ? self.call!.refusal : status),
    });
    self.call = this;
  }

  override start(listener: InterceptingServerListener): void {
    this.handler = listener;
    super.start(listener);
  }

  private refuse(request: UnreadableRequest, requestStream: boolean): void {
    if (this.refusal !== null) return;
    this.refusal = request.status;
    // Not passed on: the handler reads nothing more from this call.
    if (requestStream) this.handler?.onReceiveHalfClose();
    else this.sendStatus(this.refusal);
  }
}
