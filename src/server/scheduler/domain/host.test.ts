import { describe, expect, it } from 'vitest';
import { BerthError } from '../../../errors.js';
import { hostClientOf, requireOwnHost } from './host.js';

const NONE = new Map<string, string>();
const refusal = (f: () => unknown): BerthError => {
  try {
    f();
  } catch (err) {
    if (err instanceof BerthError) return err;
    throw err;
  }
  throw new Error('not refused');
};

describe('a host-client acts for its own host only (decision 90)', () => {
  it('is scoped to the host its subject names, or the operator maps it to', () => {
    expect(hostClientOf({ subject: 'node-a', roles: ['host-client'] }, ['admin', 'service'], NONE)).toBe(
      'node-a',
    );
    expect(hostClientOf({ subject: 'cert:node-a', roles: ['host-client'] }, ['admin'], NONE)).toBe('node-a');
    const table = new Map([['kubelet-7', 'node-b']]);
    expect(hostClientOf({ subject: 'kubelet-7', roles: ['host-client'] }, ['admin'], table)).toBe('node-b');
  });

  it('is not scoped with a role the call allows for any host, nor without the role', () => {
    expect(
      hostClientOf({ subject: 'node-a', roles: ['host-client', 'service'] }, ['admin', 'service'], NONE),
    ).toBe(undefined);
    expect(hostClientOf({ subject: 'node-a', roles: ['service'] }, ['admin', 'service'], NONE)).toBe(
      undefined,
    );
    // A reader reads any device, but binds nothing: with host-client it binds for its host only.
    expect(
      hostClientOf({ subject: 'node-a', roles: ['host-client', 'reader'] }, ['admin', 'service'], NONE),
    ).toBe('node-a');
  });

  it('refuses a host-client whose subject names no host', () => {
    const e = refusal(() =>
      hostClientOf({ subject: 'static:ab12cd34', roles: ['host-client'] }, ['admin'], NONE),
    );
    expect(e.code).toBe('PERMISSION_DENIED');
    expect(e.reason).toBe('PRINCIPAL_NOT_FOR_HOST');
    expect(e.message).toContain('names no host');
  });

  it("refuses another host's device or ARQ, naming both hosts; an unbound ARQ passes", () => {
    const e = refusal(() => requireOwnHost('node-a', 'node-a', 'node-b', 'bindings[0].host'));
    expect(e.code).toBe('PERMISSION_DENIED');
    expect(e.reason).toBe('PRINCIPAL_NOT_FOR_HOST');
    expect(e.message).toBe(
      'principal node-a may act only for host node-a, not for host node-b (bindings[0].host)',
    );
    expect(() => requireOwnHost('node-a', 'node-a', 'node-a', 'x')).not.toThrow();
    expect(() => requireOwnHost('node-a', 'node-a', null, 'x')).not.toThrow();
    expect(() => requireOwnHost('svc', undefined, 'node-b', 'x')).not.toThrow();
  });
});
