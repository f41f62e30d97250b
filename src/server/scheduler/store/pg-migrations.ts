/**
 * Numbered schema migrations for the PostgreSQL store, applied in order inside
 * one transaction each (under an advisory lock, so replicas starting together
 * migrate once) and recorded in `schema_migrations`; append, never edit.
 *
 * The same tables as the SQLite store (migrations.ts): the full domain record
 * as JSON text in `record`, the columns queries and constraints need beside
 * it. Where SQLite orders by its implicit rowid, a `seq` identity column keeps
 * creation order. Versions 1–3 match the SQLite store's; 4 (link leases) is
 * PostgreSQL's alone, as only schedulers sharing a database need it.
 */
import type { Migration } from './migrations.js';

export const PG_MIGRATIONS: readonly Migration[] = [
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
