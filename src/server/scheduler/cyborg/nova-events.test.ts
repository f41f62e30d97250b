/**
 * The Nova event sender's claims (docs/decisions.md 77), in process over
 * SQLite: a sender whose claim expired while Nova held its request, and was
 * taken over by another scheduler, counts the event as possibly told twice
 * (berth_cyborg_nova_events_claims_lost); one that kept its claim does not.
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BerthError } from '../../../errors.js';
import type { ArqBinding } from '../domain/arq.js';
import { hostName, hostRegistration, instanceId } from '../domain/fixtures.support.js';
import { validateProfile } from '../domain/profile.js';
import { openSqliteStore } from '../stores.js';
import type { UseCases } from '../usecases/use-cases.js';
import { NovaEvents } from './nova-events.js';

const CLAIM_TTL_MS = 300;

describe('Nova event sender claims', () => {
  let store: UseCases;
  let sender: NovaEvents | null = null;

  beforeEach(async () => {
    store = await openSqliteStore(':memory:');
    await store.registerHost(hostRegistration('h1'));
    await store.createProfile(
      validateProfile({ name: 'nvme', groups: [{ resourceClass: 'CUSTOM_NVME_144D_A808' }] }),
    );
  });
  afterEach(async () => {
    await sender?.stop();
    await store.close();
  });

  /** An ARQ whose bind failed (no device on h1): it owes Nova `failed`, unclaimed. */
  async function owedEvent(): Promise<string> {
    const [arq] = await store.createArqs({ profileName: 'nvme' });
    const b: ArqBinding[] = [
      {
        arqUuid: arq!.uuid,
        instanceUuid: instanceId('i1'),
        host: hostName('h1'),
        notifyNova: { holder: 'x', holdMs: 1 },
      },
    ];
    const err = await store.bindArqs(b).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BerthError);
    await store.recordBindFailure(b, err);
    return arq!.uuid;
  }

  /** A sender `A` whose Nova calls `nova` answers. */
  function startSender(nova: () => Promise<Response>): NovaEvents {
    sender = new NovaEvents(
      store,
      {
        url: 'http://nova.test/v2.1',
        credentials: { describe: 'a test token', token: async () => 't', invalidate: () => {} },
        timeoutMs: 5_000,
        retryMaxMs: 100,
        claimTtlMs: CLAIM_TTL_MS,
        fetch: nova as unknown as typeof fetch,
      },
      'A',
      false,
      pino({ level: 'silent' }),
    );
    sender.start();
    return sender;
  }

  const metric = async (events: NovaEvents, name: string) => {
    const registry = new Registry();
    events.register(registry);
    return (await registry.getSingleMetric(name)!.get()).values[0]!.value;
  };

  it('a send Nova took after the claim was taken over is counted as possibly told twice', async () => {
    const arq = await owedEvent();
    let takenOverBy: string[] = [];
    const a = startSender(async () => {
      // Nova holds the request until A's claim expired and B took the event over.
      for (;;) {
        takenOverBy = (await store.claimNovaEvents('B', 60_000, 10)).map((x) => x.uuid);
        if (takenOverBy.length > 0) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      return new Response('{"events": []}', { status: 200 });
    });
    await expect.poll(() => a.delivered, { timeout: 10_000 }).toBe(1);
    expect(takenOverBy).toEqual([arq]);
    expect(a.claimsLost).toBe(1);
    expect(await metric(a, 'berth_cyborg_nova_events_claims_lost')).toBe(1);
    expect(await store.novaEventsOwedCount()).toBe(0);
  });

  it('a send whose claim held is not counted', async () => {
    await owedEvent();
    const a = startSender(async () => new Response('{"events": []}', { status: 200 }));
    await expect.poll(() => a.delivered, { timeout: 10_000 }).toBe(1);
    expect(a.claimsLost).toBe(0);
    expect(await store.novaEventsOwedCount()).toBe(0);
  });
});
