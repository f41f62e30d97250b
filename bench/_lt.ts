import { openSqliteStore } from '../src/server/scheduler/store/sqlite-store.js';
import { loadFleet } from './bind-harness.js';

const store = await openSqliteStore(`/var/tmp/lt-one.db`);
await loadFleet(store, 2, { devicesPerHost: 20 });
const c = store.db.connection;
for (const t of [
  'hosts',
  'devices',
  'media',
  'device_events',
  'profiles',
  'cleanup_jobs',
  'idempotency_keys',
  'arqs',
  'instance_devices',
  'retention_marks',
  'link_leases',
])
  console.log(t, (c.prepare(`SELECT COUNT(*) n FROM ${t}`).get() as { n: number }).n);
console.log(c.prepare('SELECT record FROM hosts LIMIT 1').get());
console.log(c.prepare('SELECT * FROM devices LIMIT 1').get());
console.log(c.prepare('SELECT * FROM media LIMIT 1').get());
await store.close();
