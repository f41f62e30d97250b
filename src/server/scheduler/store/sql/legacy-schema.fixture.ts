/**
 * Test fixture: the two migration lists as they stood before the schema became
 * one sequence (docs/decisions.md 52), frozen as they were applied — SQLite
 * 1, 2, 3, 5 and PostgreSQL 1, 2, 3, 4 (link leases), 5. The upgrade tests
 * (schema.test.ts) build databases with them, fill them with records of that
 * time and open them with today's code. Never edit.
 */

export interface LegacyMigration {
  version: number;
  name: string;
  sql: string;
}

export const LEGACY_SQLITE_MIGRATIONS: readonly LegacyMigration[] = [
  {
    version: 1,
    name: 'init',
    sql: `
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
  generation INTEGER NOT NULL,
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
  uuid TEXT PRIMARY KEY,
  instance_uuid TEXT,
  device_uuid TEXT,
  state TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX arqs_instance ON arqs (instance_uuid);
-- Invariant 5 as a constraint: a device is bound to at most one ARQ.
CREATE UNIQUE INDEX arqs_device ON arqs (device_uuid) WHERE device_uuid IS NOT NULL;

CREATE TABLE cleanup_jobs (
  job_id TEXT PRIMARY KEY,
  device_uuid TEXT NOT NULL,
  state TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX cleanup_jobs_device ON cleanup_jobs (device_uuid);
CREATE INDEX cleanup_jobs_state ON cleanup_jobs (state);

CREATE TABLE cleanup_events (
  job_id TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  event TEXT NOT NULL,
  PRIMARY KEY (job_id, sequence)
);

CREATE TABLE migrations (
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

-- AUTOINCREMENT: revisions strictly increase and are never reused.
CREATE TABLE device_events (
  revision INTEGER PRIMARY KEY AUTOINCREMENT,
  device_uuid TEXT NOT NULL,
  removed INTEGER NOT NULL,
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
    sql: `
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
    // jobs, and the highest device event revision removed, so a watch resumed
    // from before it is told to re-list instead of silently missing events.
    sql: `
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
ALTER TABLE cleanup_jobs ADD COLUMN finished_at TEXT;
UPDATE cleanup_jobs SET finished_at = json_extract(record, '$.finishedAt');
CREATE INDEX cleanup_jobs_finished ON cleanup_jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE retention_marks (
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
`,
  },
  {
    version: 5,
    name: 'media',
    // Tenant data followed by media (docs/media-identity.md): each device's
    // media key beside its record, so the devices of one media are found on
    // any host, and the scheduler's own record of every media it has seen.
    // (Version 4 is PostgreSQL's link leases; SQLite needs no such table.)
    sql: `
ALTER TABLE devices ADD COLUMN media_key TEXT;
CREATE INDEX devices_media ON devices (media_key) WHERE media_key IS NOT NULL;
CREATE TABLE media (
  key TEXT PRIMARY KEY,
  record TEXT NOT NULL
);
`,
  },
];

export const LEGACY_PG_MIGRATIONS: readonly LegacyMigration[] = [
  {
    version: 1,
    name: 'init',
    sql: `
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
  generation BIGINT NOT NULL,
  record TEXT NOT NULL,
  UNIQUE (host, address)
);
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
  seq BIGINT GENERATED ALWAYS AS IDENTITY,
  uuid TEXT PRIMARY KEY,
  instance_uuid TEXT,
  device_uuid TEXT,
  state TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX arqs_instance ON arqs (instance_uuid, seq);
-- Invariant 5 as a constraint: a device is bound to at most one ARQ.
CREATE UNIQUE INDEX arqs_device ON arqs (device_uuid) WHERE device_uuid IS NOT NULL;

CREATE TABLE cleanup_jobs (
  seq BIGINT GENERATED ALWAYS AS IDENTITY,
  job_id TEXT PRIMARY KEY,
  device_uuid TEXT NOT NULL,
  state TEXT NOT NULL,
  record TEXT NOT NULL
);
CREATE INDEX cleanup_jobs_device ON cleanup_jobs (device_uuid, seq);
CREATE INDEX cleanup_jobs_state ON cleanup_jobs (state);

CREATE TABLE cleanup_events (
  job_id TEXT NOT NULL,
  sequence BIGINT NOT NULL,
  event TEXT NOT NULL,
  PRIMARY KEY (job_id, sequence)
);

CREATE TABLE migrations (
  seq BIGINT GENERATED ALWAYS AS IDENTITY,
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

-- Revisions come from this identity, taken under one advisory lock held to
-- COMMIT, so they are in commit order (unit-of-work.ts).
CREATE TABLE device_events (
  revision BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  device_uuid TEXT NOT NULL,
  removed BOOLEAN NOT NULL,
  record TEXT NOT NULL,
  at TEXT NOT NULL
);
`,
  },
  {
    version: 2,
    name: 'arq_guest_address',
    sql: `
ALTER TABLE arqs ADD COLUMN guest_address TEXT;
CREATE UNIQUE INDEX arqs_instance_guest_address ON arqs (instance_uuid, guest_address)
  WHERE guest_address IS NOT NULL;
`,
  },
  {
    version: 3,
    name: 'retention',
    sql: `
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
ALTER TABLE cleanup_jobs ADD COLUMN finished_at TEXT;
CREATE INDEX cleanup_jobs_finished ON cleanup_jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE retention_marks (
  name TEXT PRIMARY KEY,
  value BIGINT NOT NULL
);
`,
  },
  {
    version: 4,
    name: 'link_leases',
    sql: `
-- Which scheduler follows each host's agent (store.ts LinkLeases); times are the database's.
CREATE TABLE link_leases (
  host TEXT PRIMARY KEY REFERENCES hosts (name) ON DELETE CASCADE,
  owner TEXT NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL
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
    sql: `
ALTER TABLE devices ADD COLUMN media_key TEXT;
CREATE INDEX devices_media ON devices (media_key) WHERE media_key IS NOT NULL;
CREATE TABLE media (
  key TEXT PRIMARY KEY,
  record TEXT NOT NULL
);
`,
  },
];
