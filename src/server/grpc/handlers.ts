/**
 * Adapters from plain async functions to grpc-js handlers. A unary handler is
 * `(request, ctx) => Promise<response>`; a server-streaming handler is an async
 * generator. Cancellation reaches the handler as an AbortSignal; every thrown
 * error goes through toServiceError, so a client never sees UNKNOWN.
 */
import {
  type handleServerStreamingCall,
  type handleUnaryCall,
  Metadata,
  type ServerUnaryCall,
  type ServerWritableStream,
} from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Encoded } from './encoded.js';
import { toServiceError } from './status.js';

export interface CallContext {
  /** Fires when the client cancels or the deadline passes. */
  signal: AbortSignal;
  metadata: Metadata;
  peer: string;
  method: string;
  logger: Logger;
}

/** A unary handler may return its response already encoded (encoded.ts). */
export type UnaryFn<Req, Res> = (request: Req, ctx: CallContext) => Promise<Res | Encoded<Res>>;
/** A stream handler may yield messages or, for fan-out, messages encoded once (encoded.ts). */
export type StreamFn<Req, Res> = (request: Req, ctx: CallContext) => AsyncIterable<Res | Encoded<Res>>;

function contextFor(
  call: ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>,
  method: string,
  logger: Logger,
): CallContext {
  const controller = new AbortController();
  call.on('cancelled', () => controller.abort(new Error('cancelled by the client')));
  return { signal: controller.signal, metadata: call.metadata, peer: call.getPeer(), method, logger };
}

export function unary<Req, Res>(
  method: string,
  logger: Logger,
  fn: UnaryFn<Req, Res>,
): handleUnaryCall<Req, Res> {
  return (call, callback) => {
    const ctx = contextFor(call as ServerUnaryCall<unknown, unknown>, method, logger);
    fn(call.request, ctx).then(
      // An Encoded response passes the serializer as it is (passEncodedResponses).
      (res) => callback(null, res as Res),
      (err: unknown) => callback(toServiceError(err, logger.child({ method }))),
    );
  };
}

export function serverStream<Req, Res>(
  method: string,
  logger: Logger,
  fn: StreamFn<Req, Res>,
): handleServerStreamingCall<Req, Res> {
  return (call) => {
    const ctx = contextFor(call as ServerWritableStream<unknown, unknown>, method, logger);
    // Headers go out at once: a client knows its stream is open (a watch that
    // reconnected says so) before the first message, which may be far off.
    call.sendMetadata(new Metadata());
    void (async () => {
      try {
        for await (const msg of fn(call.request, ctx)) {
          if (ctx.signal.aborted) return;
          // An Encoded goes through the serializer GrpcServer wraps (passEncodedResponses).
          if (!call.write(msg as Res)) {
            await new Promise<void>((resolve) => {
              const done = () => {
                call.off('drain', done);
                ctx.signal.removeEventListener('abort', done);
                resolve();
              };
              call.on('drain', done);
              ctx.signal.addEventListener('abort', done);
            });
          }
        }
        if (!ctx.signal.aborted) call.end();
      } catch (err) {
        if (ctx.signal.aborted) return;
        call.emit('error', toServiceError(err, logger.child({ method })));
      }
    })();
  };
}
