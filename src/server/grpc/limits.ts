/**
 * Input hardening at the transport edge. grpc-js answers a request whose bytes
 * do not decode as the method's message with INTERNAL ("Error deserializing
 * request") — a client's malformed input reported as a server bug, below every
 * interceptor. Here each method's deserializer is wrapped so a decode failure
 * becomes a marker object, and an interceptor turns the marker into
 * INVALID_ARGUMENT naming the field `request` before any handler runs.
 */
import type {
  ServerInterceptingCallInterface,
  ServerInterceptor,
  ServerMethodDefinition,
  ServiceDefinition,
} from '@grpc/grpc-js';
import { ServerInterceptingCall } from '@grpc/grpc-js';
import { invalidArgument } from '../../errors.js';
import { toServiceError } from './status.js';

const MALFORMED = Symbol('berth.malformed-request');

interface Malformed {
  [MALFORMED]: string;
}

function isMalformed(m: unknown): m is Malformed {
  return typeof m === 'object' && m !== null && MALFORMED in m;
}

/** The definition with every request deserializer made total (never throws). */
export function guardDeserializers<D extends ServiceDefinition>(definition: D): D {
  const out: Record<string, unknown> = {};
  for (const [name, method] of Object.entries(definition)) {
    const decode = method.requestDeserialize;
    out[name] = {
      ...method,
      requestDeserialize: (b: Buffer) => {
        try {
          return decode(b);
        } catch (err) {
          return { [MALFORMED]: (err as Error).message } satisfies Malformed;
        }
      },
    };
  }
  return out as D;
}

/** Ends a call whose request did not decode with INVALID_ARGUMENT (field `request`). */
export function malformedRequestInterceptor(): ServerInterceptor {
  return (method: ServerMethodDefinition<unknown, unknown>, call: ServerInterceptingCallInterface) =>
    new ServerInterceptingCall(call, {
      start(next) {
        next({
          onReceiveMessage(message, msgNext) {
            if (!isMalformed(message)) {
              msgNext(message);
              return;
            }
            const e = toServiceError(
              invalidArgument(
                'request',
                `the request does not decode as the message of ${method.path}: ${message[MALFORMED]}`,
              ),
            );
            call.sendStatus({ code: e.code!, details: e.details ?? '', metadata: e.metadata! });
          },
        });
      },
    });
}
