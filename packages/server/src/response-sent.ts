/**
 * Whether a unary response left the node. A handler that must act on it (an auto-ack get acks
 * only a response that was sent) registers a callback on the response object with
 * `whenSent`; the server interceptor `responseSentInterceptor` calls it once: `true` when the
 * message was written to the call's HTTP/2 stream and its OK status follows, `false` when the
 * call ended first (cancelled by the client, its deadline passed, the connection broke).
 *
 * "Sent" is the most a server can know: a response written to a connection that breaks
 * afterwards is lost in transit, as with any at-most-once acknowledgement.
 */
import { ResponderBuilder, ServerInterceptingCall, ServerListenerBuilder, status, type ServerInterceptor } from '@grpc/grpc-js';

type SentCallback = (sent: boolean) => void;

const callbacks = new WeakMap<object, SentCallback>();

/** Calls `callback` once `response` was sent (true) or could not be (false). */
export function whenSent(response: object, callback: SentCallback): void {
  callbacks.set(response, callback);
}

/** Methods whose responses may carry a `whenSent` callback; other calls pass untouched. */
export function responseSentInterceptor(paths: readonly string[]): ServerInterceptor {
  const watched = new Set(paths);
  return (method, call) => {
    // Other calls keep the call grpc-js made (no extra layer on the publish path); grpc-js
    // only uses the call's interface, which the declared return type is stricter than.
    if (!watched.has(method.path)) return call as ServerInterceptingCall;
    let pending: SentCallback | undefined;
    let ended = false;
    const settle = (sent: boolean): void => {
      ended = true;
      const callback = pending;
      pending = undefined;
      callback?.(sent);
    };
    const responder = new ResponderBuilder()
      .withStart((next) => next(new ServerListenerBuilder().withOnCancel(() => settle(false)).build()))
      .withSendMessage((message: unknown, next) => {
        if (typeof message === 'object' && message !== null) {
          const callback = callbacks.get(message);
          if (callback !== undefined) {
            callbacks.delete(message);
            if (ended) callback(false);
            else pending = callback;
          }
        }
        next(message);
      })
      // A unary call's status follows its message once the message was written.
      .withSendStatus((outcome, next) => {
        next(outcome);
        settle(outcome.code === status.OK);
      })
      .build();
    return new ServerInterceptingCall(call, responder);
  };
}
