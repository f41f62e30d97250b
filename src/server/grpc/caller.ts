/** The principal the auth interceptor put on a call (src/server/grpc/auth/interceptor.ts), for handlers. */
import type { Metadata } from '@grpc/grpc-js';
import { ROLES_HEADER, SUBJECT_HEADER } from './auth/interceptor.js';

export function callerOf(metadata: Metadata): { subject: string; roles: string[] } {
  const subject = String(metadata.get(SUBJECT_HEADER)[0] ?? 'anonymous');
  const roles = String(metadata.get(ROLES_HEADER)[0] ?? '')
    .split(',')
    .filter((r) => r !== '');
  return { subject, roles };
}
