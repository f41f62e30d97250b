/**
 * Invariant 10: a principal acts only for its own host. An agent's principal
 * (a static token's or JWT's subject, or `cert:<CN>` for a client certificate)
 * names exactly one host: the host of that name, or the one an operator's
 * table maps it to. The first agent registration of a host pins its
 * principal; another principal for that host is refused. Admins (operators)
 * and a server with authentication off are not agent principals.
 */
import { permissionDenied } from '../../errors.js';

/** Who called, as the auth interceptor established it. */
export interface Caller {
  subject: string;
  roles: readonly string[];
}

/** The host a principal speaks for, or null when its subject names none. */
export function hostOfSubject(subject: string, table: ReadonlyMap<string, string>): string | null {
  const mapped = table.get(subject);
  if (mapped !== undefined) return mapped;
  const name = subject.startsWith('cert:') ? subject.slice('cert:'.length) : subject;
  return /^[A-Za-z0-9]([A-Za-z0-9._-]{0,252}[A-Za-z0-9])?$/.test(name) && !subject.startsWith('static:')
    ? name
    : null;
}

/** Whether the caller is an agent principal, bound to one host (not an admin, auth on). */
export const isAgentPrincipal = (c: Caller): boolean =>
  c.roles.includes('agent') && !c.roles.includes('admin');

/**
 * Refuses an agent principal that registers (or reports for) another host than
 * its own, or a host pinned to another principal. Returns the principal to pin,
 * or undefined when the caller is not an agent principal.
 */
export function checkHostPrincipal(
  caller: Caller,
  host: string,
  pinned: string | undefined,
  table: ReadonlyMap<string, string>,
): string | undefined {
  if (!isAgentPrincipal(caller)) return undefined;
  const own = hostOfSubject(caller.subject, table);
  if (own !== host) {
    throw permissionDenied(
      'PRINCIPAL_NOT_FOR_HOST',
      `principal ${caller.subject} may speak only for ${own === null ? 'no host (its subject names none; map it in host_principals)' : `host ${own}`}, not for host ${host}`,
      { principal: caller.subject, host },
    );
  }
  if (pinned !== undefined && pinned !== caller.subject) {
    throw permissionDenied(
      'HOST_PINNED_TO_ANOTHER_PRINCIPAL',
      `host ${host} is pinned to principal ${pinned}; principal ${caller.subject} may not speak for it (berth host delete ${host} first, if the host was reinstalled)`,
      { principal: caller.subject, host, pinned },
    );
  }
  return caller.subject;
}
