/**
 * Retention through the real servers (docs/decisions.md 32): a bind storm's history is
 * pruned under the configured cap while the scheduler serves; a watch resumed
 * from before what was pruned gets FAILED_PRECONDITION REVISION_COMPACTED, and
 * the SDK and `berth device watch` re-list instead of missing changes; a
 * request id replayed after its ARQ was deleted is refused by name.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BerthClientError } from '../../src/client/sdk.js';
import { berth, cliEnv, start } from '../helpers/berth-cli.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { expectCode } from '../helpers/errors.js';
import {
  createAndBind,
  createClassProfile,
  stateName,
  VF_CLASS,
  vfHostDefinition,
} from '../helpers/invariants.js';

const HOST = 'retention-host';
const MAX_ROWS = 40;

describe('retention', () => {
  let cluster: Cluster;

  beforeAll(async () => {
    cluster = await startCluster([vfHostDefinition(HOST, 4)], {
      scheduler: {
        retention: { historyMs: 7 * 86_400_000, maxRows: MAX_ROWS, requestIdMs: 86_400_000 },
        // Passes are driven by the test (scheduler.pruner.pass()), not by the clock.
        retentionIntervalMs: 3_600_000,
      },
    });
    await cluster.waitForDevices(HOST, 4);
    await createClassProfile(cluster.client, 'vf', VF_CLASS);
  }, 60_000);

  afterAll(async () => {
    await cluster?.stop();
  });

  const rows = (table: string): number => {
    const db = new Database(cluster.dbPath, { readonly: true });
    try {
      return (db.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n;
    } finally {
      db.close();
    }
  };

  it('a bind storm stays under the row cap; the current revision and the devices are untouched', async () => {
    const { client, scheduler } = cluster;
    for (let k = 0; k < 30; k++) {
      await createAndBind(client, 'vf', `storm-${k}`, HOST);
      await client.arqs.deleteAcceleratorRequests({ uuids: [], instanceUuid: `storm-${k}` });
    }
    const before = rows('device_events');
    expect(before).toBeGreaterThan(MAX_ROWS);
    const revision = await scheduler.useCases.currentRevision();
    const counts = await scheduler.pruner.pass();
    expect(counts?.deviceEvents).toBe(before - MAX_ROWS);
    expect(rows('device_events')).toBe(MAX_ROWS);
    expect(await scheduler.useCases.currentRevision()).toBe(revision);
    const after = await client.devices.listDevices({ filter: undefined, pageSize: 0, pageToken: '' });
    expect(after.devices.map((d) => stateName(d.deviceState))).toEqual(
      Array(4).fill('DEVICE_STATE_AVAILABLE'),
    );
  });

  it('a watch resumed from before the pruned events: REVISION_COMPACTED; the SDK re-lists and goes on', async () => {
    const { client } = cluster;
    const raw = client.watchDevices({ filter: undefined, fromRevision: 1 });
    const err = await raw.next().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BerthClientError);
    expect([(err as BerthClientError).codeName, (err as BerthClientError).reason]).toEqual([
      'FAILED_PRECONDITION',
      'REVISION_COMPACTED',
    ]);
    expect((err as BerthClientError).message).toMatch(
      /from_revision 1 is older than the oldest device event kept/,
    );

    const relists: string[] = [];
    const watch = client.watchDevicesRelisting({ filter: undefined, fromRevision: 1 }, (e) =>
      relists.push(e.reason ?? ''),
    );
    const initial: string[] = [];
    for await (const m of watch) {
      if (m.synced) break;
      if (m.initial && m.device) initial.push(m.device.address);
    }
    await watch.return(undefined);
    expect(relists).toEqual(['REVISION_COMPACTED']);
    expect(initial).toHaveLength(4);
  });

  it('berth device watch --from-revision: says it re-lists, prints the state, then the next change', async () => {
    const { client, root, scheduler } = cluster;
    const env = cliEnv(join(root, 'client-config.yaml'), { BERTH_ENDPOINT: scheduler.address });
    const w = start(['device', 'watch', '--from-revision', '1', '--max-events', '1', '-o', 'json'], env);
    await w.waitFor(/"synced":true/, 30_000);
    await createAndBind(client, 'vf', 'after-watch', HOST);
    const { code } = await w.exited;
    expect(code).toBe(0);
    expect(w.stderr()).toMatch(
      /^berth: from_revision 1 is older than the oldest device event kept .*\(re-listing the current state now\)$/m,
    );
    const lines = w
      .stdout()
      .trim()
      .split('\n')
      .map(
        (l) =>
          JSON.parse(l) as { initial: boolean; synced: boolean; device: { instance_uuid?: string } | null },
      );
    expect(lines.filter((l) => l.initial && !l.synced)).toHaveLength(4);
    expect(lines.at(-1)?.device?.instance_uuid).toBe('after-watch');
    // The one-shot CLI path with a plain, current revision is unchanged.
    const list = await berth(['device', 'list', '-o', 'json'], env);
    expect(list.code).toBe(0);
  }, 60_000);

  it('a request id replayed after its ARQ was deleted is refused by name (not NOT_FOUND about the old ARQ)', async () => {
    const { client } = cluster;
    const [arq] = (
      await client.arqs.createAcceleratorRequests({ profileName: 'vf', requestId: 'once', tags: [] })
    ).acceleratorRequests;
    await client.arqs.deleteAcceleratorRequests({ uuids: [arq!.uuid], instanceUuid: '' });
    const err = await expectCode(
      client.arqs.createAcceleratorRequests({ profileName: 'vf', requestId: 'once', tags: [] }),
      'FAILED_PRECONDITION',
      'REQUEST_ID_SPENT',
    );
    expect(err.message).toMatch(/request id "once" already made ARQs .* new request id/);
  });
});
