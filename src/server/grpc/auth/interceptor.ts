/**
 * The one server interceptor every Berth gRPC server runs (the policy:
 * policy.ts), and the start-up line that says whether auth is on.
 */
import {
  Metadata,
  ServerInterceptingCall,
  type ServerInterceptingCallInterface,
  type ServerInterceptor,
  type ServerMethodDefinition,
  status,
} from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { toServiceError } from '../status.js';
import { type Authenticator, isAuthRefusal, unauthenticated } from './authenticator.js';
import { isOpenMethod, methodKey } from './policy.js';

/** Metadata handlers see after authentication (client-supplied values are removed first). */
export const SUBJECT_HEADER = 'berth-auth-subject';
export const ROLES_HEADER = 'berth-auth-roles';

/**
 * The one server interceptor. Open methods pass; for every other method the
 * metadata is held until the credential is checked, then either the call
 * proceeds (with `authorization` removed so it never reaches a handler's logs,
 * and the principal in berth-auth-* metadata) or it ends with
 * UNAUTHENTICATED / PERMISSION_DENIED before any handler runs.
 */
export function authInterceptor(auth: Authenticator, logger?: Logger): ServerInterceptor {
  return (method: ServerMethodDefinition<unknown, unknown>, call: ServerInterceptingCallInterface) => {
    const path = method.path;
    return new ServerInterceptingCall(call, {
      start(next) {
        next({
          onReceiveMetadata(metadata, mdNext) {
            metadata.remove(SUBJECT_HEADER);
            metadata.remove(ROLES_HEADER);
            if (isOpenMethod(path)) {
              mdNext(metadata);
              return;
            }
            auth.authorize(path, metadata, call.getAuthContext()).then(
              (p) => {
                metadata.remove('authorization');
                metadata.set(SUBJECT_HEADER, p.subject);
                metadata.set(ROLES_HEADER, p.roles.join(','));
                mdNext(metadata);
              },
              (err: unknown) => {
                const e = isAuthRefusal(err) ? err : unauthenticated('invalid credentials');
                logger?.info(
                  { method: methodKey(path), peer: call.getPeer(), code: e.code, why: e.message },
                  'call refused',
                );
                const st = toServiceError(e);
                call.sendStatus({
                  code: st.code ?? status.UNAUTHENTICATED,
                  details: e.message,
                  metadata: st.metadata ?? new Metadata(),
                });
              },
            );
          },
        });
      },
    });
  };
}

/** Logs the state of auth at server start: a warning when it is off. */
export function logAuthMode(auth: Authenticator, logger: Logger, server: string): void {
  if (!auth.enabled) {
    logger.warn(
      { server },
      'AUTHENTICATION IS OFF (auth mode "none"): anyone who can reach this port can clean, release and bind devices',
    );
  } else {
    logger.info({ server }, 'authentication on: bearer tokens / client certificates required');
  }
}
