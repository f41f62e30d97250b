/**
 * The claims on Nova's events (docs/decisions.md 77), a contract every backend
 * passes through the use cases: what is owed is counted and claimed a page at
 * a time, oldest first; a live claim keeps every other scheduler off; an
 * expired one is taken over; a bind holds its own event until it is released
 * or undone (the undo's `failed` event is free at once); racing claimers get
 * each event once; and whether the sender still held its claim when Nova took
 * the event is told.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BerthError } from '../../../errors.js';
import type { ArqBinding } from '../domain/arq.js';
import { facts, hostName, instanceId, testUuid } from '../domain/fixtures.support.js';
import { validateProfile } from '../domain/profile.js';
import type { UseCases } from '../usecases/use-cases.js';
import type { OpenStore } from './store-contract.support.js';

const LONG = 60_000;
const profile = validateProfile({ name: 'nvme', groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808' }] });
const hold = (holder: string, holdMs = LONG) => ({ holder, holdMs });

export function runNovaClaimsContract(name: string, open: OpenStore): void {
  describe(`Nova event claims: ${name}`, () => {
    let dir: string;
    let store: UseCases;

    beforeEach(async () => {
      dir = mkdtempSync(join(tmpdir(), 'berth-claims-'));
      store = await open(join(dir, 'scheduler.db'));
      await store.registerHost({
        name: hostName('h1'),
        endpoint: 'h1:7071',
        bootId: 'b',
        agentEpoch: 'e1',
        agentVersion: '0.1.0',
        features: ['cleanup.v1'],
        drivers: ['pci', 'nvme'],
      });
      await store.createProfile(profile);
    });
    afterEach(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });

    /** `n` ARQs whose bind failed on a host without devices: each owes Nova `failed`, unclaimed. */
    async function failedBinds(n: number): Promise<string[]> {
      const uuids: string[] = [];
      for (let i = 0; i < n; i++) {
        const [arq] = await store.createArqs({ profileName: 'nvme' });
        const b: ArqBinding[] = [
          {
            arqUuid: arq!.uuid,
            instanceUuid: instanceId(`i${i}`),
            host: hostName('h1'),
            notifyNova: hold('binder'),
          },
        ];
        const err = await store.bindArqs(b).then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(BerthError);
        await store.recordBindFailure(b, err);
        uuids.push(arq!.uuid);
      }
      return uuids;
    }

    it('what is owed is counted and claimed a page at a time, oldest first; a live claim keeps others off', async () => {
      const owed = await failedBinds(5);
      expect(await store.novaEventsOwedCount()).toBe(5);
      const a = await store.claimNovaEvents('A', LONG, 3);
      expect(a.map((x) => x.uuid)).toEqual(owed.slice(0, 3));
      expect(a[0]!.novaEvent).toEqual({ instanceUuid: 'i0', status: 'failed' });
      const b = await store.claimNovaEvents('B', LONG, 10);
      expect(b.map((x) => x.uuid)).toEqual(owed.slice(3));
      expect(await store.claimNovaEvents('B', LONG, 10)).toEqual([]);
      // A claim is not taken again by its own owner either: one send at a time.
      expect(await store.claimNovaEvents('A', LONG, 10)).toEqual([]);
      expect(await store.novaEventsOwedCount()).toBe(5);
      // Released, a send to retry is anyone's.
      await store.releaseNovaEvents([owed[0]!, owed[4]!], 'A');
      expect((await store.claimNovaEvents('B', LONG, 10)).map((x) => x.uuid)).toEqual([owed[0]]);
    });

    it('an expired claim is taken over; the sender it was taken from is told it no longer held it', async () => {
      const [u] = await failedBinds(1);
      // A claim that lasts no time: expired as soon as it is taken (its scheduler died at once).
      expect((await store.claimNovaEvents('A', 0, 10)).map((x) => x.uuid)).toEqual([u]);
      expect((await store.claimNovaEvents('B', LONG, 10)).map((x) => x.uuid)).toEqual([u]);
      const sent = { instanceUuid: 'i0', status: 'failed' as const };
      // A's send came back after B took over: Nova may have been told twice, and A says so.
      expect(await store.novaEventDelivered(u!, sent, 'A')).toBe(false);
      expect(await store.novaEventsOwedCount()).toBe(0);
      expect((await store.getArq(testUuid(u!))).novaEvent).toBeNull();
      // B's send of the same event finds it delivered and its claim gone with it.
      expect(await store.novaEventDelivered(u!, sent, 'B')).toBe(false);
    });

    it('a sender that kept its claim is told so, and the event is cleared', async () => {
      const [u] = await failedBinds(1);
      await store.claimNovaEvents('A', LONG, 10);
      expect(await store.novaEventDelivered(u!, { instanceUuid: 'i0', status: 'failed' }, 'A')).toBe(true);
      expect(await store.novaEventsOwedCount()).toBe(0);
      expect(await store.claimNovaEvents('B', 0, 10)).toEqual([]);
    });

    it('a bind holds its event until released; an undo replaces it with `failed`, free at once', async () => {
      await store.upsertInventory(hostName('h1'), {
        kind: 'snapshot',
        revision: 1,
        devices: [facts({ index: 0 }), facts({ index: 1 })],
      });
      const [x, y] = [
        (await store.createArqs({ profileName: 'nvme' }))[0]!,
        (await store.createArqs({ profileName: 'nvme' }))[0]!,
      ];
      const bx: ArqBinding = {
        arqUuid: x.uuid,
        instanceUuid: instanceId('ix'),
        host: hostName('h1'),
        notifyNova: hold('A'),
      };
      const by: ArqBinding = {
        arqUuid: y.uuid,
        instanceUuid: instanceId('iy'),
        host: hostName('h1'),
        notifyNova: hold('A'),
      };
      await store.bindArqs([bx]);
      await store.bindArqs([by]);
      expect(await store.novaEventsOwedCount()).toBe(2);
      // Neither `completed` is anyone's to send while its bind may be undone.
      expect(await store.claimNovaEvents('B', LONG, 10)).toEqual([]);
      expect(await store.claimNovaEvents('A', LONG, 10)).toEqual([]);
      // x confirmed: released; only its holder's release counts.
      await store.releaseNovaEvents([x.uuid], 'B');
      expect(await store.claimNovaEvents('B', LONG, 10)).toEqual([]);
      await store.releaseNovaEvents([x.uuid], 'A');
      const claimed = await store.claimNovaEvents('B', LONG, 10);
      expect(claimed.map((a) => [a.uuid, a.novaEvent])).toEqual([
        [x.uuid, { instanceUuid: 'ix', status: 'completed' }],
      ]);
      // y not confirmed: undone, and the `failed` that replaced the held `completed` is free.
      await store.revertUnconfirmedBind([by], 'the agent did not answer');
      expect((await store.claimNovaEvents('B', LONG, 10)).map((a) => [a.uuid, a.novaEvent])).toEqual([
        [y.uuid, { instanceUuid: 'iy', status: 'failed' }],
      ]);
      // Another write of an ARQ owing the same event keeps its claim (a guest address, say).
      expect(await store.assignGuestAddresses('ix')).toHaveLength(1);
      expect(await store.claimNovaEvents('C', LONG, 10)).toEqual([]);
      // An unbind clears what was owed, and its claim with it.
      await store.unbindArqs([x.uuid]);
      expect(await store.novaEventsOwedCount()).toBe(1);
    });

    it('claimers racing for the same events get each one once', async () => {
      const owed = await failedBinds(24);
      const rounds = await Promise.all(
        Array.from({ length: 12 }, (_, i) => store.claimNovaEvents(`S${i % 3}`, LONG, 4)),
      );
      const got = rounds.flat().map((a) => a.uuid);
      expect(got).toHaveLength(new Set(got).size);
      expect(new Set(got)).toEqual(new Set(owed));
    });

    it('a scheduler alone on its database lets go of the claims an earlier run left, not its own', async () => {
      const owed = await failedBinds(3);
      await store.claimNovaEvents('old', LONG, 2);
      await store.claimNovaEvents('new', LONG, 1);
      expect(await store.releaseOthersNovaClaims('new')).toBe(2);
      expect((await store.claimNovaEvents('new', LONG, 10)).map((a) => a.uuid)).toEqual(owed.slice(0, 2));
    });
  });
}
