/**
 * The PostgreSQL backend against the same contracts as SQLite (docs/decisions.md
 * 36): the store contract (every use case through the UseCases API) and the
 * unit-of-work contract, on a real PostgreSQL server started for this file. Each test's
 * path names its own database, so a reopen finds what was acknowledged.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../../../../test/helpers/grpc.js';
import { type PostgresServer, startPostgres } from '../../../../test/helpers/postgres.js';
import { available, postgresServer } from '../../../../test/helpers/prerequisites.js';
import { newDevice } from '../domain/device-state.js';
import { facts, hostName, testUuid } from '../domain/fixtures.support.js';
import { openPgStore } from '../stores.js';
import { FOR_UPDATE } from '../usecases/unit-of-work.js';
import { runMediaContract } from './media-contract.support.js';
import { runNovaClaimsContract } from './nova-claims-contract.support.js';
import { PgDatabase } from './pg-store.js';
import { LEGACY_PG_MIGRATIONS } from './sql/legacy-schema.fixture.js';
import { runStoreContract } from './store-contract.support.js';
import { runUnitOfWorkContract } from './unit-of-work-contract.support.js';
import { runUpgradeContract } from './upgrade-contract.support.js';

const usable = available(postgresServer(), 'the PostgreSQL store contract');

let server: PostgresServer | undefined;
beforeAll(async () => {
  if (usable) server = await startPostgres();
}, 120_000);
// A server holding every test's database takes a while to stop and remove on a loaded machine.
afterAll(async () => {
  await server?.stop();
}, 120_000);

/** One database per test path: `berth_<hash>`. */
const databaseFor = async (path: string) =>
  server!.createDatabase(`berth_${createHash('sha256').update(path).digest('hex').slice(0, 16)}`);

// Without PostgreSQL the whole file is skipped (one line above says why), not left empty.
describe.skipIf(!usable)('PostgreSQL backend', () => {
  runStoreContract('postgres', async (path, options) => openPgStore(await databaseFor(path), options));
  runMediaContract('postgres', async (path, options) => openPgStore(await databaseFor(path), options));
  runNovaClaimsContract('postgres', async (path, options) => openPgStore(await databaseFor(path), options));
  runUnitOfWorkContract('postgres', async (path) => {
    const db = new PgDatabase(await databaseFor(path));
    await db.migrate();
    return db;
  });
  runUpgradeContract('postgres', {
    async legacy(path, upTo) {
      // As PgDatabase.migrate did before the one schema sequence: one transaction, each migration recorded.
      const client = new pg.Client({ connectionString: await databaseFor(path) });
      await client.connect();
      await client.query('BEGIN');
      await client.query(
        'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)',
      );
      for (const m of LEGACY_PG_MIGRATIONS.filter((m) => m.version <= upTo)) {
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)', [
          m.version,
          m.name,
          new Date().toISOString(),
        ]);
      }
      await client.query('COMMIT');
      return {
        exec: async (sql, params = []) => {
          let n = 0;
          await client.query(
            sql.replace(/\?/g, () => `$${++n}`),
            params,
          );
        },
        close: () => client.end(),
      };
    },
    open: async (path, options) => openPgStore(await databaseFor(path), options),
    async structure(path) {
      const client = new pg.Client({ connectionString: await databaseFor(path) });
      await client.connect();
      try {
        const lines = async (sql: string) =>
          (await client.query<{ line: string }>(sql)).rows.map((r) => r.line);
        return [
          ...(await lines(
            `SELECT format('column %s.%s #%s %s null=%s identity=%s default=%s', table_name, column_name,
               ordinal_position, data_type, is_nullable, is_identity, column_default) AS line
             FROM information_schema.columns WHERE table_schema = 'public'`,
          )),
          ...(await lines(
            "SELECT format('index %s: %s', indexname, indexdef) AS line FROM pg_indexes WHERE schemaname = 'public'",
          )),
          ...(await lines(
            `SELECT format('constraint %s on %s: %s', conname, conrelid::regclass, pg_get_constraintdef(oid)) AS line
             FROM pg_constraint WHERE connamespace = 'public'::regnamespace`,
          )),
        ].sort();
      } finally {
        await client.end();
      }
    },
  });

  it('an event numbered before another but committed after it is not skipped: the log is read once both committed', async () => {
    // Writers number their events side by side (decision 59). Unit S numbers
    // its event, then is held inside its COMMIT by a deferred trigger waiting
    // on a lock this test holds; unit F numbers the next event and commits. A
    // reader that saw F's event alone would move its cursor past S's.
    const url = await databaseFor('events/late-commit');
    const db = new PgDatabase(url);
    await db.migrate();
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    const HOLD = 4242;
    try {
      await admin.query(`
        CREATE FUNCTION hold_slow() RETURNS trigger LANGUAGE plpgsql AS
          $$ BEGIN PERFORM pg_advisory_xact_lock(${HOLD}); RETURN NULL; END $$;
        CREATE CONSTRAINT TRIGGER hold_slow AFTER INSERT ON device_events DEFERRABLE INITIALLY DEFERRED
          FOR EACH ROW WHEN (NEW.device_uuid = 'slow') EXECUTE FUNCTION hold_slow()`);
      await admin.query('SELECT pg_advisory_lock($1)', [HOLD]);
      const event = (uuid: string, index: number) => ({
        ...newDevice(hostName('h1'), facts({ index }), testUuid(uuid), '2026-01-01T00:00:00.000Z'),
        generation: 1,
      });
      const log = { eventLog: true };
      const start = await db.read((r) => r.currentRevision(), log);
      const waiting = async (n: number) =>
        eventually(
          async () =>
            Number(
              (
                await admin.query<{ n: string }>(
                  "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'",
                )
              ).rows[0]!.n,
            ),
          (k) => k === n,
        );
      const slow = db.run((uow) => uow.appendDeviceEvent(event('slow', 0)));
      await waiting(1); // S numbered its event and waits inside its COMMIT
      await db.run((uow) => uow.appendDeviceEvent(event('fast', 1)));
      const direct = await admin.query<{ revision: number; device_uuid: string }>(
        'SELECT revision, device_uuid FROM device_events WHERE revision > $1 ORDER BY revision',
        [start],
      );
      // What a plain snapshot would show now: F's event alone, above S's number.
      expect(direct.rows.map((r) => r.device_uuid)).toEqual(['fast']);
      const read = db.read((r) => r.eventsSince(start, 10), log);
      const current = db.read((r) => r.currentRevision(), log);
      await waiting(3); // both readers wait for S too
      await admin.query('SELECT pg_advisory_unlock($1)', [HOLD]);
      await slow;
      const events = await read;
      expect(events.map((e) => e.device.uuid)).toEqual(['slow', 'fast']);
      expect(events[0]!.revision).toBeLessThan(events[1]!.revision);
      expect(await current).toBe(events[1]!.revision);
    } finally {
      await admin.end();
      await db.close();
    }
  });

  it('reads asked for together go in one round trip, each its own statement: the one after a locking read sees what the lock holder committed', async () => {
    // Decision 95: a unit settles a media by locking its row, then reading its
    // devices, asked for together. Another unit holds the media's row and
    // moves a device onto the media; the devices' read must see it once the
    // lock is granted (one statement over both would read its snapshot from
    // before the wait and miss it).
    const url = await databaseFor('executor/asked-together');
    const db = new PgDatabase(url);
    await db.migrate();
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      const dev = {
        ...newDevice(hostName('h1'), facts({ index: 0 }), testUuid('d1'), '2026-01-01T00:00:00.000Z'),
        generation: 1,
      };
      await db.run((uow) => uow.putDevice(dev, null));
      await admin.query(`INSERT INTO media (key, record, host) VALUES ('k1', '{"key":"k1"}', 'h1')`);
      await admin.query("BEGIN; SELECT key FROM media WHERE key = 'k1' FOR UPDATE");
      await admin.query("UPDATE devices SET media_key = 'k1' WHERE uuid = $1", [dev.uuid]);
      const settled = db.run((uow) =>
        Promise.all([uow.mediaByKeys(['k1'], FOR_UPDATE), uow.devices({ mediaKeys: ['k1'] }, FOR_UPDATE)]),
      );
      // The unit waits for the media's lock, with both reads (and its BEGIN) in the string it sent.
      const waiting = await eventually(
        async () =>
          (
            await admin.query<{ query: string }>(
              "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
            )
          ).rows.map((r) => r.query),
        (q) => q.length === 1,
      );
      expect(waiting[0]).toMatch(/^BEGIN; SELECT record FROM media .*; SELECT record FROM devices /s);
      await admin.query('COMMIT');
      const [media, devices] = await settled;
      expect(media.map((m) => m.key)).toEqual(['k1']);
      expect(devices.map((d) => d.uuid)).toEqual([dev.uuid]);
    } finally {
      await admin.end();
      await db.close();
    }
  });

  it('a server that ends every connection (idle, checked out, in a transaction, listening) crashes nothing: a unit that lost its connection before its COMMIT runs again on a new one', async () => {
    const url = await databaseFor('terminate/all');
    const db = new PgDatabase(url, { poolSize: 4 });
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      await db.migrate();
      const changed: number[] = [];
      db.onChange(() => changed.push(Date.now()));
      const backends = async () =>
        (
          await admin.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
          )
        ).rows[0]!.n;
      // Connections in each state: idle in the pool (four units at once), the LISTEN one, and one
      // checked out, in a transaction (its first read done) until `release` resolves.
      await Promise.all([1, 2, 3, 4].map(() => db.read(async (uow) => uow.host(hostName('none')))));
      await eventually(backends, (n) => n >= 4);
      let release!: () => void;
      const held = new Promise<void>((r) => {
        release = r;
      });
      let entered!: () => void;
      const inUnit = new Promise<void>((r) => {
        entered = r;
      });
      let runs = 0;
      const heldUnit = db
        .read(async (uow) => {
          runs++;
          await uow.host(hostName('none'));
          entered();
          await held;
          return uow.host(hostName('none'));
        })
        .then(
          () => 'committed',
          (e: unknown) => (e as { reason?: string }).reason ?? String(e),
        );
      await inUnit;
      const ended = await admin.query<{ ok: boolean }>(
        'SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
      );
      expect(ended.rows.length).toBeGreaterThanOrEqual(3);
      // The process is still here (an unhandled 'error' would have ended the test run); the held unit's
      // connection is gone, so its next read fails before the COMMIT: it runs again, on a new connection,
      // and commits. The next units open new connections, and the listener comes back.
      release();
      expect(await heldUnit).toBe('committed');
      // Twice, or more when the pool handed it another ended connection it had not noticed yet.
      expect(runs).toBeGreaterThanOrEqual(2);
      const before = changed.length;
      await eventually(
        () => db.read(async (uow) => uow.host(hostName('none'))).then(() => backends()),
        (n) => n >= 2,
      );
      await eventually(
        async () => changed.length,
        (n) => n > before,
      );
    } finally {
      await admin.end();
      await db.close();
    }
  });

  describe('link leases (several schedulers on one database)', () => {
    const host = (name: string) => ({
      name: hostName(name),
      endpoint: `127.0.0.1:${name.length + 5000}`,
      bootId: 'b1',
      agentEpoch: 'e1',
      agentVersion: '1.0.0',
      features: ['cleanup.v1'],
      drivers: ['pci'],
    });

    it('one owner at a time: a live lease is kept from others, an expired one is taken, a stolen one is not renewed', async () => {
      const store = await openPgStore(await databaseFor('leases/owners'));
      try {
        const leases = store.leases!;
        await store.registerHost(host('h1'));
        await store.registerHost(host('h2'));
        expect(await leases.claim('h1', 'A', 60_000)).toBe(true);
        expect(await leases.claim('h1', 'A', 60_000)).toBe(true); // its owner may claim again
        expect(await leases.claim('h1', 'B', 60_000)).toBe(false);
        expect(await leases.live()).toEqual(new Map([['h1', 'A']]));
        expect((await leases.renew('A', ['h1', 'h2'], 60_000)).map((h) => h.host)).toEqual(['h1']);
        expect(await leases.renew('B', ['h1'], 60_000)).toEqual([]);
        expect(await leases.expired()).toEqual([]);
        // A stops renewing: its lease runs out (1 ms), and B takes it.
        expect(await leases.claim('h2', 'A', 1)).toBe(true);
        const expired = await eventually(
          () => leases.expired(),
          (e) => e.length === 1,
        );
        expect(expired).toEqual([
          {
            host: hostName('h2'),
            endpoint: '127.0.0.1:5002',
            features: ['cleanup.v1'],
            connected: false,
            lastSeen: expect.any(String),
          },
        ]);
        expect(await leases.claim('h2', 'B', 60_000)).toBe(true);
        expect((await leases.renew('A', ['h1', 'h2'], 60_000)).map((h) => h.host)).toEqual(['h1']);
        // A clean stop hands everything over at once.
        await leases.release('A');
        expect((await leases.expired()).map((h) => h.host)).toEqual(['h1']);
        expect(await leases.live()).toEqual(new Map([['h2', 'B']]));
      } finally {
        await store.close();
      }
    });

    it('schedulers racing for one expired lease: exactly one wins; a deleted host takes its lease with it', async () => {
      const store = await openPgStore(await databaseFor('leases/race'));
      try {
        const leases = store.leases!;
        await store.registerHost(host('h1'));
        expect(await leases.claim('h1', 'dead', 1)).toBe(true);
        await eventually(
          () => leases.expired(),
          (e) => e.length === 1,
        );
        const owners = Array.from({ length: 8 }, (_, i) => `s${i}`);
        const won = await Promise.all(owners.map((o) => leases.claim('h1', o, 60_000)));
        expect(won.filter(Boolean)).toHaveLength(1);
        const winner = owners[won.indexOf(true)]!;
        expect(await leases.live()).toEqual(new Map([['h1', winner]]));
        await store.deleteHost(hostName('h1'));
        expect(await leases.live()).toEqual(new Map());
        expect(await leases.renew(winner, ['h1'], 60_000)).toEqual([]);
      } finally {
        await store.close();
      }
    });
  });
});
