import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { hostName, hostRegistration } from '../domain/fixtures.support.js';
import type { AgentLinks } from '../runtime/agent-links.js';
import { rejection } from '../store/store-contract.support.js';
import { storageOutage, UnitWatch } from '../store/unit-watch.support.js';
import { type UseCases, useCasesOver } from '../usecases/use-cases.js';
import { type AgentRegistration, Registration } from './registration.js';

describe('a registration while the database does not answer', () => {
  let dir: string;
  let db: UnitWatch;
  let useCases: UseCases;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-registration-'));
    db = new UnitWatch(join(dir, 's.db'));
    useCases = useCasesOver(db);
  });
  afterEach(async () => {
    await useCases.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers UNAVAILABLE with the storage reason; the known host is not taken for a new one', async () => {
    const host = hostRegistration('h1');
    await useCases.registerHost(host);
    const links = {
      has: () => false,
      get: () => undefined,
      connect: vi.fn(),
      drop: vi.fn(() => false),
    };
    const claimLink = vi.fn(async () => false);
    const registration = new Registration({
      useCases,
      links: links as unknown as AgentLinks,
      claimLink,
      hostPrincipals: new Map(),
      schedulerId: 's1',
      heartbeatSeconds: 10,
      logger: pino({ level: 'silent' }),
    });
    const reg: AgentRegistration = {
      host,
      held: [],
      media: [],
      signingKey: undefined,
      retiredSigningKeys: [],
      certificates: [],
    };
    db.failReads = storageOutage(db.path);
    const units = db.writes.units;
    const e = await rejection(registration.register(reg, { subject: 'admin', roles: [] }));
    expect([e.code, e.reason]).toEqual(['UNAVAILABLE', 'STORE_IO_ERROR']);
    // Nothing was decided on a read that did not happen: no lease, no registration written, no link.
    expect(db.writes.units).toBe(units);
    expect(claimLink).not.toHaveBeenCalled();
    expect(links.connect).not.toHaveBeenCalled();
    db.failReads = null;
    expect((await useCases.getHost(hostName('h1'))).name).toBe('h1');
  });
});
