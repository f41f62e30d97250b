/**
 * The scheduler's schema: ONE numbered sequence of migrations for both
 * backends, applied in order and recorded in `schema_migrations`; append,
 * never edit. Where the SQL must differ a migration reads the dialect
 * (./dialect.ts); a version means the same change on SQLite and PostgreSQL.
 *
 * Rows keep the full domain record as JSON text in `record`, with the columns
 * that queries and constraints need pulled out beside it, so a field added to
 * a record needs no migration while indexes stay exact (an old record lacking
 * a newer field is completed where it is read: usecases/upgrade.ts).
 *
 * Until version 4 meant one thing (docs/decisions.md 52), SQLite files went
 * 1, 2, 3, 5 and PostgreSQL databases 1, 2, 3, 4 (link leases), 5: a SQLite
 * file of that time gets 4 applied at its next start, after 5, which is why
 * 4 depends on nothing 5 made.
 */

import type { Dialect } from './dialect.js';

export interface Migration {
  version: number;
  name: string;
  /** The migration's statements in one dialect. */
  sql(d: Dialect): string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'init',
    sql: (d) => `
CREATE TABLE hosts (
  name TEXT PRIMARY KEY,
  record TEXT NOT NULL
);

CREATE TABLE devices (
  uuid TEXT PRIMARY KEY,
  host TEXT NOT NULL,
  address TEXT NOT NULL,
  type TEXT NOT NULL,
  resource_class TEXT NOT NULL,
  vendor_id TEXT NOT NULL,
  product_id TEXT NOT NULL,
  iommu_group INTEGER,
  device_state TEXT NOT NULL,
  generation ${d.int64} NOT NULL,
  record TEXT NOT NULL,
  UNIQUE (host, address)
);
-- Allocation reads only one host's devices of one class (or vendor/product).
CREATE INDEX devices_host_class_state ON devices (host, resource_class, device_state);
CREATE INDEX devices_host_ids ON devices (host, vendor_id, product_id);
CREATE INDEX devices_host_iommu ON devices (host, iommu_group, device_state);
CREATE INDEX devices_state ON devices (device_state);

CREATE TABLE profiles (
  name TEXT PRIMARY KEY,
  uuid TEXT NOT NULL UNIQUE,
  record TEXT NOT NULL
);

CREATE TABLE arqs (
  ${d.creationOrderColumn}
  uuid TEXT PRIMARY KEY,
  instance_uuid TEXT,
  device_uuid TEXT,
  state TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX arqs_instance ON arqs (${d.inCreationOrder('instance_uuid')});
-- Invariant 5 as a constraint: a device is bound to at most one ARQ.
CREATE UNIQUE INDEX arqs_device ON arqs (device_uuid) WHERE device_uuid IS NOT NULL;

CREATE TABLE cleanup_jobs (
  ${d.creationOrderColumn}
  job_id TEXT PRIMARY KEY,
  device_uuid TEXT NOT NULL,
  state TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX cleanup_jobs_device ON cleanup_jobs (${d.inCreationOrder('device_uuid')});
CREATE INDEX cleanup_jobs_state ON cleanup_jobs (state);

CREATE TABLE cleanup_events (
  job_id TEXT NOT NULL,
  sequence ${d.int64} NOT NULL,
  event TEXT NOT NULL,
  PRIMARY KEY (job_id, sequence)
);

CREATE TABLE migrations (
  ${d.creationOrderColumn}
  uuid TEXT PRIMARY KEY,
  instance_uuid TEXT NOT NULL,
  state TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX migrations_instance ON migrations (instance_uuid, state);

CREATE TABLE instance_devices (
  instance_uuid TEXT PRIMARY KEY,
  record TEXT NOT NULL
);

CREATE TABLE idempotency_keys (
  key TEXT PRIMARY KEY,
  fingerprint TEXT NOT NULL,
  result TEXT NOT NULL,
  created_at TEXT NOT NULL
);

-- Revisions are in commit order (store/unit-of-work.ts).
CREATE TABLE device_events (
  revision ${d.revisionKey},
  device_uuid TEXT NOT NULL,
  removed ${d.boolean} NOT NULL,
  record TEXT NOT NULL,
  at TEXT NOT NULL
);
`,
  },
  {
    version: 2,
    name: 'arq_guest_address',
    // The guest PCI address of a binding, stable for the binding's life: a
    // column (not only inside `record`) so that the unique index makes two
    // devices of one instance on one guest address impossible to store.
    sql: () => `
ALTER TABLE arqs ADD COLUMN guest_address TEXT;
CREATE UNIQUE INDEX arqs_instance_guest_address ON arqs (instance_uuid, guest_address)
  WHERE guest_address IS NOT NULL;
`,
  },
  {
    version: 3,
    name: 'retention',
    // Retention (docs/operator-guide.md "Retention"): indexes that let a pass
    // find the oldest rows without a scan, a finished_at column for cleanup
    // jobs (filled from the records), and the highest device event revision
    // removed, so a watch resumed from before it is told to re-list instead
    // of silently missing events.
    sql: (d) => `
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
ALTER TABLE cleanup_jobs ADD COLUMN finished_at TEXT;
UPDATE cleanup_jobs SET finished_at = ${d.recordField('finishedAt')};
CREATE INDEX cleanup_jobs_finished ON cleanup_jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE retention_marks (
  name TEXT PRIMARY KEY,
  value ${d.int64} NOT NULL
);
`,
  },
  {
    version: 4,
    name: 'link_leases',
    // Which scheduler follows each host's agent (store.ts LinkLeases; times
    // are the database's). Only schedulers sharing a PostgreSQL database use
    // it; a SQLite file has the table too, empty, so that the schema and its
    // numbers are one.
    sql: (d) => `
CREATE TABLE link_leases (
  host TEXT PRIMARY KEY REFERENCES hosts (name) ON DELETE CASCADE,
  owner TEXT NOT NULL,
  expires_at ${d.timestamp} NOT NULL
);
CREATE INDEX link_leases_owner ON link_leases (owner);
CREATE INDEX link_leases_expires ON link_leases (expires_at);
`,
  },
  {
    version: 5,
    name: 'media',
    // Tenant data followed by media (docs/media-identity.md): each device's
    // media key beside its record, so the devices of one media are found on
    // any host, and the scheduler's own record of every media it has seen.
    sql: () => `
ALTER TABLE devices ADD COLUMN media_key TEXT;
CREATE INDEX devices_media ON devices (media_key) WHERE media_key IS NOT NULL;
CREATE TABLE media (
  key TEXT PRIMARY KEY,
  record TEXT NOT NULL
);
`,
  },
  {
    version: 6,
    name: 'erasure_certificates',
    // Erasure certificates (docs/erasure-certificates.md): the keys each
    // host's agent signs with (pinned at its first registration, kept when
    // rotated so old certificates stay verifiable), the certificates, a chain
    // per media (UNIQUE: one link per place), kept under their own retention,
    // and which service principal created an instance's first ARQ (who may
    // read its certificates).
    sql: (d) => `
CREATE TABLE agent_keys (
  host TEXT NOT NULL,
  kid TEXT NOT NULL,
  retired_at TEXT,
  record TEXT NOT NULL,
  PRIMARY KEY (host, kid)
);
CREATE TABLE erasure_certificates (
  hash TEXT PRIMARY KEY,
  media_key TEXT NOT NULL,
  seq ${d.int64} NOT NULL,
  host TEXT NOT NULL,
  job_id TEXT NOT NULL,
  device_uuid TEXT NOT NULL,
  instance_uuid TEXT NOT NULL,
  received_at TEXT NOT NULL,
  record TEXT NOT NULL,
  UNIQUE (media_key, seq)
);
CREATE INDEX erasure_certificates_job ON erasure_certificates (job_id);
CREATE INDEX erasure_certificates_device ON erasure_certificates (device_uuid);
CREATE INDEX erasure_certificates_instance ON erasure_certificates (instance_uuid);
CREATE INDEX erasure_certificates_received ON erasure_certificates (received_at);
CREATE TABLE instance_owners (
  instance_uuid TEXT PRIMARY KEY,
  subject TEXT NOT NULL,
  created_at TEXT NOT NULL
);
`,
  },
  {
    version: 7,
    name: 'media_reporters',
    // Reports bound to their host (docs/media-identity.md, decision 65): the
    // host a media was last seen or reported on, beside its record, so the
    // rows one host alone reported are counted against its bound; and the
    // operator's note on a media forgotten (berth media forget), while no
    // device of it comes back.
    sql: (d) => `
ALTER TABLE media ADD COLUMN host TEXT;
ALTER TABLE media ADD COLUMN forgotten TEXT;
UPDATE media SET host = ${d.recordField('host')};
CREATE INDEX media_host ON media (host);
`,
  },
  {
    version: 8,
    name: 'nova_event_claims',
    // Which replica tells Nova of a bind (docs/decisions.md 77): the event an
    // ARQ owes (`status:instance`, or NULL) beside its record, so the senders
    // read only what is owed, and the claim on it — the replica that holds it
    // and until when (the database's time). A claim that expired is taken over.
    sql: (d) => `
ALTER TABLE arqs ADD COLUMN nova_event TEXT;
ALTER TABLE arqs ADD COLUMN nova_claim_owner TEXT;
ALTER TABLE arqs ADD COLUMN nova_claim_expires ${d.timestamp};
UPDATE arqs SET nova_event = ${d.recordField('novaEvent.status')} || ':' || ${d.recordField('novaEvent.instanceUuid')};
CREATE INDEX arqs_nova_owed ON arqs (${d.inCreationOrder('nova_claim_expires')}) WHERE nova_event IS NOT NULL;
`,
  },
  {
    version: 9,
    name: 'bind_claim_instance',
    // The instance a Cyborg bind's claim is for (docs/decisions.md 89), beside
    // the record, so the claim of another bind to one instance finds it (no hot
    // add) before its ARQs carry the instance. Claims of older schedulers name none.
    sql: (d) => `
ALTER TABLE arqs ADD COLUMN bind_instance TEXT;
UPDATE arqs SET bind_instance = ${d.recordField('bindClaim.instanceUuid')};
CREATE INDEX arqs_bind_instance ON arqs (bind_instance) WHERE bind_instance IS NOT NULL;
`,
  },
];

/** The table that records which migrations a database has. */
export const SCHEMA_MIGRATIONS_TABLE =
  'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)';

/** The migrations a database with `applied` versions still needs, in order. */
export function pendingMigrations(applied: ReadonlySet<number>): Migration[] {
  return MIGRATIONS.filter((m) => !applied.has(m.version));
}
