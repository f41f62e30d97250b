import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { hostName, hostRegistration } from '../domain/fixtures.support.js';
import { rejection } from '../store/store-contract.support.js';
import { storageOutage, UnitWatch } from '../store/unit-watch.support.js';
import { type UseCases, useCasesOver } from '../usecases/use-cases.js';
import { AgentDirectory } from './agent-directory.js';
import { RemoteAgent } from './agent-link.js';
import type { AgentLinks } from './agent-links.js';

const H1 = hostName('h1');

describe('the agent directory, when the database does not answer', () => {
  let dir: string;
  let db: UnitWatch;
  let useCases: UseCases;
  let agents: AgentDirectory;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-directory-'));
    db = new UnitWatch(join(dir, 's.db'));
    useCases = useCasesOver(db);
    // h1's agent is followed by another scheduler (the backend has leases).
    const links = { get: () => undefined, has: () => false } as unknown as AgentLinks;
    agents = new AgentDirectory(links, useCases, () => ({}));
    await useCases.registerHost(hostRegistration('h1'));
    await useCases.setHostConnected(H1, true);
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    agents.close();
    await useCases.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps the client of a host it cannot read, and says why (UNAVAILABLE); a host that is gone loses it', async () => {
    const close = vi.spyOn(RemoteAgent.prototype, 'close');
    await agents.refresh([H1]);
    const remote = agents.get(H1);
    expect(remote).toBeInstanceOf(RemoteAgent);
    expect(remote!.isConnected).toBe(true);
    // What was read is stale a second later: the next refresh reads the host again.
    const now = Date.now();
    vi.spyOn(Date, 'now').mockReturnValue(now + 5_000);
    db.failReads = storageOutage(db.path);
    const e = await rejection(agents.refresh([H1]));
    expect([e.code, e.reason]).toEqual(['UNAVAILABLE', 'STORE_IO_ERROR']);
    expect(agents.get(H1)).toBe(remote);
    expect(close).not.toHaveBeenCalled();
    // The database answers again: the host was deleted, so its client goes.
    db.failReads = null;
    await useCases.setHostConnected(H1, false);
    await useCases.deleteHost(H1);
    await agents.refresh([H1]);
    expect(agents.get(H1)).toBeUndefined();
    expect(close).toHaveBeenCalledTimes(1);
  });
});
