/**
 * Input hardening at the transport edge.
 *
 * Outgoing statuses are capped: an error message may quote the request (a
 * profile name, an id) and a request may carry megabytes of it; a status of
 * that size goes out in HTTP/2 trailers, which the peer refuses, and the call
 * hangs until its deadline. Messages, field violations and ErrorInfo metadata
 * are cut to a bounded size here, whatever the handler put in them.
 *
 * Undecodable requests: grpc-js answers a request whose bytes
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
import { Metadata, ServerInterceptingCall } from '@grpc/grpc-js';
import { invalidArgument } from '../../errors.js';
import { BadRequest, ErrorInfo } from '../../gen/google/rpc/error_details.js';
import { Status } from '../../gen/google/rpc/status.js';
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

/** Longest status message / violation description / metadata value sent back. */
export const MAX_STATUS_TEXT = 1024;
const MAX_VIOLATIONS = 32;

const cut = (s: string, n = MAX_STATUS_TEXT) => (s.length > n ? `${s.slice(0, n)}… (${s.length} chars)` : s);

/** The status with every text bounded (details, google.rpc.Status details, metadata). */
export function capStatus<T extends { details?: string; metadata?: Metadata | null }>(st: T): T {
  const out = { ...st };
  if (typeof out.details === 'string') out.details = cut(out.details);
  const md = out.metadata;
  if (!md) return out;
  const copy = new Metadata();
  for (const [k, values] of Object.entries(md.toJSON())) {
    for (const v of values) {
      if (k === 'grpc-status-details-bin' && Buffer.isBuffer(v)) copy.add(k, capDetails(v));
      else if (typeof v === 'string') copy.add(k, cut(v, 256));
      else copy.add(k, v);
    }
  }
  out.metadata = copy;
  return out;
}

function capDetails(raw: Buffer): Buffer {
  try {
    const st = Status.decode(raw);
    st.message = cut(st.message);
    st.details = st.details.map((d) => {
      if (d.typeUrl.endsWith('/google.rpc.BadRequest')) {
        const br = BadRequest.decode(d.value);
        br.fieldViolations = br.fieldViolations.slice(0, MAX_VIOLATIONS).map((v) => ({
          ...v,
          field: cut(v.field, 256),
          description: cut(v.description),
        }));
        return { ...d, value: Buffer.from(BadRequest.encode(br).finish()) };
      }
      if (d.typeUrl.endsWith('/google.rpc.ErrorInfo')) {
        const info = ErrorInfo.decode(d.value);
        info.metadata = Object.fromEntries(
          Object.entries(info.metadata).map(([k, v]) => [cut(k, 64), cut(v, 256)]),
        );
        return { ...d, value: Buffer.from(ErrorInfo.encode(info).finish()) };
      }
      return d;
    });
    return Buffer.from(Status.encode(st).finish());
  } catch {
    return Buffer.alloc(0);
  }
}

/**
 * Ends a call whose request did not decode with INVALID_ARGUMENT (field
 * `request`), and bounds every status the handlers send.
 */
export function malformedRequestInterceptor(): ServerInterceptor {
  return (method: ServerMethodDefinition<unknown, unknown>, call: ServerInterceptingCallInterface) =>
    new ServerInterceptingCall(call, {
      sendStatus(status, next) {
        next(capStatus(status));
      },
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
