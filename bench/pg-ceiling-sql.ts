/**
 * The best case of PostgreSQL's bind cycle (bench/pg-ceiling.ts, decision 96):
 * the scheduler's three units — create an ARQ, bind it, delete it — as
 * PL/pgSQL functions, one round trip each, and the same units as the
 * scheduler sends them (its statements and round trips, from a bare node-pg
 * client), to tell "fewer round trips" from "less statement work".
 *
 * Both do what the scheduler's units do on the real schema and rows
 * (src/server/scheduler/usecases/arqs.ts, media.ts, records.ts; the SQL of
 * store/sql/*.ts, batched as store/pg-store.ts batches it): the same tables,
 * reads (`FOR UPDATE` where the unit locks), writes (the ARQ upserted, the
 * device's compare-and-set on its generation, the media upserted, the device
 * event under the event lock taken SHARED, the instance's owner) and the
 * instance's advisory lock. What they leave out is what the bench's fleet
 * never needs: idempotency keys, bind claims, Nova's events, devices that
 * are cleaned (a released VF goes back to available), duplicate tags and the
 * allocation's filters beyond the IOMMU group (every VF is healthy and
 * matches). The functions build the records in SQL (jsonb `||` on the row read);
 * the statements variant builds them in JavaScript, as the scheduler does.
 */
import type pg from 'pg';
import { newArq } from '../src/server/scheduler/domain/arq.js';
import type { DeviceRecord } from '../src/server/scheduler/domain/device-state.js';
import { type MediaState, settleMedia as settleInDomain } from '../src/server/scheduler/domain/media.js';
import type { RequestGroup } from '../src/server/scheduler/domain/profile.js';

/** The scheduler's event lock key (pg-store.ts EVENT_LOCK). */
const EVENT_LOCK = 0x6265_7274_0002;

/** The scheduler's bench subject on a scheduler without authentication (the owner it records). */
export const SUBJECT = 'anonymous';

/** The ARQ upsert's conflict clause (store/sql/unit-workloads.ts putArq, nova-claims.ts). */
const ARQ_UPSERT = `ON CONFLICT (uuid) DO UPDATE SET instance_uuid = excluded.instance_uuid,
           device_uuid = excluded.device_uuid, state = excluded.state,
           guest_address = excluded.guest_address, bind_instance = excluded.bind_instance,
           record = excluded.record,
           nova_claim_owner = CASE WHEN arqs.nova_event = excluded.nova_event THEN arqs.nova_claim_owner END,
           nova_claim_expires = CASE WHEN arqs.nova_event = excluded.nova_event THEN arqs.nova_claim_expires END,
           nova_event = excluded.nova_event`;

const MEDIA_UPSERT = `ON CONFLICT (key) DO UPDATE SET record = excluded.record, host = excluded.host, forgotten = NULL`;

/** The device's columns from its record, and the compare-and-set on its generation (putDevice). */
const deviceUpdate = (v: string) =>
  `UPDATE devices SET type = ${v}->>'type', resource_class = ${v}->>'resourceClass',
       vendor_id = ${v}->>'vendorId', product_id = ${v}->>'productId', iommu_group = (${v}->>'iommuGroup')::int,
       device_state = ${v}->>'deviceState', generation = (${v}->>'generation')::bigint,
       media_key = nullif(${v}->'media'->>'key', ''), record = ${v}::text
     WHERE uuid = ${v}->>'uuid' AND generation = v_gen`;

/**
 * The media's settlement (usecases/media.ts): its row and its devices under
 * lock, in key order; one allocated device is its holder, none lets a held
 * media go (clean: the bench's VFs are not cleaned); the row upserted.
 */
const settleMedia = `
  SELECT record::jsonb INTO v_media FROM media WHERE key IN (v_key) ORDER BY key FOR UPDATE;
  IF v_media IS NULL THEN RAISE EXCEPTION 'ceiling: media % has no row', v_key; END IF;
  v_holder := NULL;
  v_allocated := 0;
  FOR v_row IN SELECT record FROM devices WHERE media_key IN (v_key) ORDER BY host, address FOR UPDATE LOOP
    IF v_row.record::jsonb->>'deviceState' = 'allocated' THEN
      v_allocated := v_allocated + 1;
      v_holder := v_row.record::jsonb;
    END IF;
  END LOOP;
  IF v_allocated > 1 THEN RAISE EXCEPTION 'ceiling: media % allocated twice', v_key USING ERRCODE = '40001'; END IF;
  IF v_holder IS NOT NULL THEN
    v_media := v_media || jsonb_build_object('condition', 'held', 'reason', '', 'holder', jsonb_build_object(
      'deviceUuid', v_holder->'uuid', 'host', v_holder->'host', 'address', v_holder->'address',
      'arqUuid', v_holder->'arqUuid', 'instanceUuid', v_holder->'instanceUuid', 'migrationUuid', v_holder->'migrationUuid'));
  ELSIF v_media->>'condition' = 'held' THEN
    v_media := v_media || jsonb_build_object('condition', 'clean', 'holder', NULL, 'reason', '');
  END IF;
  v_media := v_media || jsonb_build_object('updatedAt', p_now);
  INSERT INTO media (key, record, host) VALUES (v_key, v_media::text, v_media->>'host') ${MEDIA_UPSERT};
  PERFORM pg_advisory_xact_lock_shared(${EVENT_LOCK});
  INSERT INTO device_events (device_uuid, removed, record, at) VALUES (v_new->>'uuid', FALSE, v_new::text, p_now);`;

/** The three units as functions; `CREATE OR REPLACE`, so running it twice is harmless. */
export const CEILING_FUNCTIONS = `
CREATE OR REPLACE FUNCTION berth_ceiling_create(p_profile text, p_uuid text, p_now text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_profile jsonb;
  v_arq text;
BEGIN
  SELECT record::jsonb INTO v_profile FROM profiles WHERE name = p_profile OR uuid = p_profile;
  IF v_profile IS NULL THEN RAISE EXCEPTION 'ceiling: no profile %', p_profile; END IF;
  IF jsonb_array_length(v_profile->'groups') <> 1 OR (v_profile->'groups'->0->>'count')::int <> 1 THEN
    RAISE EXCEPTION 'ceiling: profile % does not make one ARQ', p_profile;
  END IF;
  v_arq := jsonb_build_object('uuid', p_uuid, 'profileName', v_profile->'name', 'groupId', 0,
    'group', v_profile->'groups'->0, 'state', 'initial', 'instanceUuid', NULL, 'host', NULL,
    'deviceUuid', NULL, 'deviceAddress', NULL, 'attachHandle', NULL, 'tag', '', 'error', '',
    'createdAt', p_now, 'deviceType', '', 'guestAddress', NULL)::text;
  INSERT INTO arqs (uuid, instance_uuid, device_uuid, state, guest_address, nova_event, bind_instance, record)
    VALUES (p_uuid, NULL, NULL, 'initial', NULL, NULL, NULL, v_arq) ${ARQ_UPSERT};
  RETURN v_arq;
END $$;

CREATE OR REPLACE FUNCTION berth_ceiling_bind(p_arq text, p_instance text, p_host text, p_subject text, p_now text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  v_arq jsonb;
  v_row record;
  v_busy int[];
  v_uuid text;
  v_gen bigint;
  v_dev jsonb;
  v_new jsonb;
  v_addr text;
  v_bound text;
  v_key text;
  v_media jsonb;
  v_holder jsonb;
  v_allocated int;
BEGIN
  -- The instance's owner, in the bind's own unit (as the scheduler does since decision 95).
  INSERT INTO instance_owners (instance_uuid, subject, created_at) VALUES (p_instance, p_subject, p_now)
    ON CONFLICT (instance_uuid) DO NOTHING;
  PERFORM pg_advisory_xact_lock(hashtextextended('instance:' || p_instance, 0));
  SELECT record::jsonb INTO v_arq FROM arqs WHERE uuid = p_arq FOR UPDATE;
  IF v_arq IS NULL THEN RAISE EXCEPTION 'ceiling: no ARQ %', p_arq; END IF;
  IF v_arq->>'state' <> 'initial' THEN RAISE EXCEPTION 'ceiling: ARQ % is %', p_arq, v_arq->>'state'; END IF;
  PERFORM record FROM hosts WHERE name = p_host FOR UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'ceiling: no host %', p_host; END IF;
  -- The candidates, then the busy IOMMU groups (usecases/allocate.ts); the first free candidate.
  SELECT array_agg(DISTINCT iommu_group) INTO v_busy FROM devices WHERE host = p_host AND iommu_group IS NOT NULL
    AND device_state IN ('allocated', 'pending_cleaning', 'cleaning');
  FOR v_row IN SELECT uuid, iommu_group, generation, record FROM devices WHERE host = p_host
      AND resource_class = v_arq->'group'->>'resourceClass' AND device_state = 'available'
      ORDER BY host, address LOOP
    IF v_row.iommu_group IS NULL OR v_busy IS NULL OR NOT v_row.iommu_group = ANY (v_busy) THEN
      v_uuid := v_row.uuid;
      v_gen := v_row.generation;
      v_dev := v_row.record::jsonb;
      EXIT;
    END IF;
  END LOOP;
  IF v_uuid IS NULL THEN RAISE EXCEPTION 'ceiling: no allocatable device on host %', p_host; END IF;
  v_new := v_dev || jsonb_build_object('deviceState', 'allocated', 'arqUuid', p_arq, 'instanceUuid', p_instance,
    'migrationUuid', NULL, 'burned', (v_dev->>'burned')::boolean OR (v_dev->>'oneTimeUse')::boolean,
    'reserved', v_dev->'total', 'generation', v_gen + 1, 'updatedAt', p_now);
  ${deviceUpdate('v_new')};
  IF NOT FOUND THEN RAISE EXCEPTION 'ceiling: device % changed', v_uuid USING ERRCODE = '40001'; END IF;
  -- The instance's other ARQs (their tags).
  PERFORM record FROM arqs WHERE instance_uuid = p_instance ORDER BY seq;
  v_addr := v_new->>'address';
  v_bound := (v_arq || jsonb_build_object('state', 'bound', 'instanceUuid', p_instance, 'host', p_host,
    'deviceUuid', v_uuid, 'deviceAddress', v_addr,
    'attachHandle', jsonb_build_object('domain', split_part(v_addr, ':', 1), 'bus', split_part(v_addr, ':', 2),
      'device', split_part(split_part(v_addr, ':', 3), '.', 1), 'function', split_part(v_addr, '.', 2),
      'managed', v_new->'managed'),
    'deviceType', v_new->'type', 'error', ''))::text;
  INSERT INTO arqs (uuid, instance_uuid, device_uuid, state, guest_address, nova_event, bind_instance, record)
    VALUES (p_arq, p_instance, v_uuid, 'bound', NULL, NULL, NULL, v_bound) ${ARQ_UPSERT};
  v_key := v_new->'media'->>'key';
  ${settleMedia}
  RETURN v_bound;
END $$;

CREATE OR REPLACE FUNCTION berth_ceiling_delete(p_arq text, p_now text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_arq jsonb;
  v_instance text;
  v_row record;
  v_gen bigint;
  v_dev jsonb;
  v_new jsonb;
  v_key text;
  v_media jsonb;
  v_holder jsonb;
  v_allocated int;
BEGIN
  SELECT record::jsonb INTO v_arq FROM arqs WHERE uuid = p_arq FOR UPDATE;
  IF v_arq IS NULL THEN RETURN NULL; END IF;
  v_instance := v_arq->>'instanceUuid';
  IF v_instance IS NOT NULL THEN PERFORM pg_advisory_xact_lock(hashtextextended('instance:' || v_instance, 0)); END IF;
  IF v_arq->>'deviceUuid' IS NOT NULL THEN
    SELECT generation, record::jsonb INTO v_gen, v_dev FROM devices WHERE uuid = v_arq->>'deviceUuid' FOR UPDATE;
    IF v_dev->>'deviceState' = 'allocated' AND v_dev->>'arqUuid' = p_arq THEN
      IF (v_dev->>'supportsCleaning')::boolean THEN
        RAISE EXCEPTION 'ceiling: device % is cleaned, which the ceiling does not do', v_dev->>'uuid';
      END IF;
      v_new := v_dev || jsonb_build_object('arqUuid', NULL, 'instanceUuid', NULL, 'migrationUuid', NULL,
        'deviceState', 'available', 'reserved', 0, 'generation', v_gen + 1, 'updatedAt', p_now);
      ${deviceUpdate('v_new')};
      IF NOT FOUND THEN RAISE EXCEPTION 'ceiling: device % changed', v_dev->>'uuid' USING ERRCODE = '40001'; END IF;
      v_key := v_new->'media'->>'key';
    END IF;
  END IF;
  DELETE FROM arqs WHERE uuid = p_arq;
  IF v_instance IS NOT NULL THEN
    PERFORM record FROM migrations WHERE instance_uuid = v_instance AND state = 'planned' ORDER BY seq FOR UPDATE;
  END IF;
  IF v_key IS NOT NULL THEN
    ${settleMedia}
  END IF;
  RETURN p_arq;
END $$;
`;

/** Counts the round trips a variant makes (one `query` call, one round trip, as bench/statements.ts counts). */
export interface Trips {
  n: number;
}

/** One cycle's three units against a pool; each returns what the next needs. */
export interface CycleOps {
  readonly name: string;
  create(uuid: string): Promise<void>;
  /** The device bound. */
  bind(arq: string, instance: string, host: string): Promise<string>;
  delete(arq: string): Promise<void>;
}

const now = () => new Date().toISOString();

/** The units as the functions above: one round trip each, named prepared statements. */
export function functionOps(pool: pg.Pool, profile: string, trips: Trips): CycleOps {
  const call = async (name: string, text: string, values: unknown[]) => {
    trips.n++;
    const r = await pool.query<{ r: string | null }>({ name, text, values });
    return r.rows[0]?.r ?? null;
  };
  return {
    name: 'functions',
    async create(uuid) {
      const rec = await call('ceiling_create', 'SELECT berth_ceiling_create($1, $2, $3) AS r', [
        profile,
        uuid,
        now(),
      ]);
      if ((JSON.parse(rec!) as { uuid: string }).uuid !== uuid)
        throw new Error(`ceiling: create returned ${rec}`);
    },
    async bind(arq, instance, host) {
      const rec = await call('ceiling_bind', 'SELECT berth_ceiling_bind($1, $2, $3, $4, $5) AS r', [
        arq,
        instance,
        host,
        SUBJECT,
        now(),
      ]);
      return (JSON.parse(rec!) as { deviceUuid: string }).deviceUuid;
    },
    async delete(arq) {
      const r = await call('ceiling_delete', 'SELECT berth_ceiling_delete($1, $2) AS r', [arq, now()]);
      if (r !== arq) throw new Error(`ceiling: delete of ${arq} found nothing`);
    },
  };
}

type Json = Record<string, unknown>;
type Rec = { record: string };

/**
 * The units as the scheduler sends them (store/pg-store.ts UnitExecutor): BEGIN
 * and the writes whose answer the unit does not use go as literals with the
 * next statement that is awaited, in one simple-protocol string; a statement
 * awaited alone is a named prepared one; the device's compare-and-set is the
 * guarded `WITH w AS (…)` form; the events go with COMMIT. Records are built
 * in JavaScript from the rows read.
 */
export function statementOps(pool: pg.Pool, profile: string, trips: Trips): CycleOps {
  const unit = async <T>(fn: (q: Query) => Promise<T>): Promise<T> => {
    const client = await pool.connect();
    const q = new Query(client, trips);
    try {
      return await fn(q);
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  };
  return {
    name: 'statements',
    async create(uuid) {
      await unit(async (q) => {
        const p = q.one<Json>(
          await q.string([
            'BEGIN',
            q.sql('SELECT record FROM profiles WHERE name = ? OR uuid = ?', [profile, profile]),
          ]),
        );
        const groups = p.groups as Json[];
        // The domain's own new ARQ (domain/arq.ts), under the uuid this loop chose.
        const arq = {
          ...newArq({
            profileName: p.name as string,
            groupId: 0,
            group: groups[0] as unknown as RequestGroup,
            tag: '',
            createdAt: now(),
          }),
          uuid,
        };
        await q.string([q.arqUpsert(arq), 'COMMIT']);
      });
    },
    async bind(arq, instance, host) {
      const at = now();
      // The owner in a unit of its own: the scheduler's statements as they were when this
      // variant was measured (before decision 95 moved it into the bind's unit).
      await q1(pool, trips, [
        'BEGIN',
        `INSERT INTO instance_owners (instance_uuid, subject, created_at) VALUES (${lit(instance)}, ${lit(SUBJECT)}, ${lit(at)}) ON CONFLICT (instance_uuid) DO NOTHING`,
        'COMMIT',
      ]);
      return unit(async (q) => {
        const a = q.one<Json>(
          await q.string([
            'BEGIN',
            q.sql('SELECT pg_advisory_xact_lock(hashtextextended(?, 0))', [`instance:${instance}`]),
            q.sql('SELECT record FROM arqs WHERE uuid = ? FOR UPDATE', [arq]),
          ]),
        );
        if (a.state !== 'initial') throw new Error(`ceiling: ARQ ${arq} is ${String(a.state)}`);
        q.one(
          await q.prepared('ceiling_host', 'SELECT record FROM hosts WHERE name = $1 FOR UPDATE', [host]),
        );
        const group = a.group as { resourceClass: string };
        const candidates = (
          await q.prepared<Rec>(
            'ceiling_candidates',
            `SELECT record FROM devices WHERE host = $1 AND resource_class = $2 AND device_state = 'available'
             ORDER BY host, address`,
            [host, group.resourceClass],
          )
        ).map((r) => JSON.parse(r.record) as Json);
        const busy = new Set(
          (
            await q.prepared<{ g: number }>(
              'ceiling_busy',
              `SELECT DISTINCT iommu_group AS g FROM devices WHERE host = $1 AND iommu_group IS NOT NULL
               AND device_state IN ('allocated', 'pending_cleaning', 'cleaning')`,
              [host],
            )
          ).map((r) => r.g),
        );
        const d = candidates.find((c) => c.iommuGroup === null || !busy.has(c.iommuGroup as number));
        if (!d) throw new Error(`ceiling: no allocatable device on host ${host}`);
        const next: Json = {
          ...d,
          deviceState: 'allocated',
          arqUuid: arq,
          instanceUuid: instance,
          migrationUuid: null,
          burned: Boolean(d.burned) || Boolean(d.oneTimeUse),
          reserved: d.total,
          generation: (d.generation as number) + 1,
          updatedAt: at,
        };
        const address = String(next.address);
        const [domain, bus, slotFn] = address.split(':') as [string, string, string];
        const [slot, fn] = slotFn.split('.') as [string, string];
        const bound = {
          ...a,
          state: 'bound',
          instanceUuid: instance,
          host,
          deviceUuid: next.uuid,
          deviceAddress: address,
          attachHandle: { domain, bus, device: slot, function: fn, managed: next.managed },
          deviceType: next.type,
          error: '',
        };
        await q.string([
          q.guardedDevice(next, d.generation as number),
          q.sql('SELECT record FROM arqs WHERE instance_uuid = ? ORDER BY seq', [instance]),
        ]);
        q.pending.push(q.arqUpsert(bound));
        await q.settleMedia(next, at);
        return String(next.uuid);
      });
    },
    async delete(arq) {
      const at = now();
      await unit(async (q) => {
        const a = q.one<Json>(
          await q.string(['BEGIN', q.sql('SELECT record FROM arqs WHERE uuid = ? FOR UPDATE', [arq])]),
        );
        const instance = a.instanceUuid as string;
        q.pending.push(
          q.sql('SELECT pg_advisory_xact_lock(hashtextextended(?, 0))', [`instance:${instance}`]),
        );
        const d = q.one<Json>(
          await q.string([
            ...q.take(),
            q.sql('SELECT record FROM devices WHERE uuid = ? FOR UPDATE', [a.deviceUuid]),
          ]),
        );
        if (d.deviceState !== 'allocated' || d.arqUuid !== arq)
          throw new Error(`ceiling: ARQ ${arq} holds no device`);
        const next: Json = {
          ...d,
          arqUuid: null,
          instanceUuid: null,
          migrationUuid: null,
          deviceState: 'available',
          reserved: 0,
          generation: (d.generation as number) + 1,
          updatedAt: at,
        };
        await q.string([
          q.guardedDevice(next, d.generation as number),
          q.sql('DELETE FROM arqs WHERE uuid = ?', [arq]),
          q.sql(
            `SELECT record FROM migrations WHERE instance_uuid = ? AND state = 'planned' ORDER BY seq FOR UPDATE`,
            [instance],
          ),
        ]);
        await q.settleMedia(next, at);
      });
    },
  };
}

/** One statement string alone, outside any unit (the owner's unit). */
async function q1(pool: pg.Pool, trips: Trips, parts: string[]): Promise<void> {
  trips.n++;
  await pool.query(parts.join('; '));
}

const lit = (v: unknown): string => {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'number' || typeof v === 'boolean') return String(v).toUpperCase();
  return `'${String(v).replaceAll("'", "''")}'`;
};

/** One unit's statements on its connection, sent as the scheduler's executor sends them. */
class Query {
  pending: string[] = [];
  constructor(
    private readonly client: pg.PoolClient,
    private readonly trips: Trips,
  ) {}

  sql(text: string, params: readonly unknown[]): string {
    let i = 0;
    return text.replace(/\?/g, () => lit(params[i++]));
  }

  take(): string[] {
    return this.pending.splice(0);
  }

  /**
   * One simple-protocol string; the rows of its last statement. A guard's miss
   * (22P02 from `berth-miss`) is the scheduler's CONCURRENT_UPDATE, which it runs
   * the unit again for: here a serialization failure, which the loop retries.
   */
  async string<R = Rec>(parts: string[]): Promise<R[]> {
    this.trips.n++;
    const r = (await this.client.query(parts.join('; ')).catch((err: { code?: string; message?: string }) => {
      if (err.code === '22P02' && err.message?.includes('berth-miss'))
        throw Object.assign(err, { code: '40001' });
      throw err;
    })) as unknown as pg.QueryResult | pg.QueryResult[];
    const last = Array.isArray(r) ? r[r.length - 1]! : r;
    return last.rows as R[];
  }

  async prepared<R = Rec>(name: string, text: string, values: unknown[]): Promise<R[]> {
    this.trips.n++;
    return (await this.client.query({ name, text, values })).rows as R[];
  }

  one<T>(rows: Rec[]): T {
    if (!rows[0]) throw new Error('ceiling: a row the unit needs is missing');
    return JSON.parse(rows[0].record) as T;
  }

  arqUpsert(a: Json): string {
    return this.sql(
      `INSERT INTO arqs (uuid, instance_uuid, device_uuid, state, guest_address, nova_event, bind_instance, record)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) ${ARQ_UPSERT}`,
      [a.uuid, a.instanceUuid, a.deviceUuid, a.state, null, null, null, JSON.stringify(a)],
    );
  }

  /** putDevice's compare-and-set, guarded as `laterChanging` sends it. */
  guardedDevice(d: Json, previous: number): string {
    const media = d.media as { key?: string } | null;
    const update = this.sql(
      `UPDATE devices SET type = ?, resource_class = ?, vendor_id = ?, product_id = ?, iommu_group = ?,
               device_state = ?, generation = ?, media_key = ?, record = ?
             WHERE uuid = ? AND generation = ?`,
      [
        d.type,
        d.resourceClass,
        d.vendorId,
        d.productId,
        d.iommuGroup,
        d.deviceState,
        d.generation,
        media?.key || null,
        JSON.stringify(d),
        d.uuid,
        previous,
      ],
    );
    return `WITH w AS (${update} RETURNING 1) SELECT CASE WHEN EXISTS (SELECT 1 FROM w) THEN 1 ELSE ('berth-miss:0:' || (SELECT count(*) FROM w))::int END`;
  }

  /** usecases/media.ts for the one media the unit touched, then the event and COMMIT (pg-store.ts commitSql). */
  async settleMedia(d: Json, at: string): Promise<void> {
    const key = (d.media as { key: string }).key;
    const parts = this.take();
    const mediaRows =
      parts.length > 0
        ? await this.string([
            ...parts,
            this.sql('SELECT record FROM media WHERE key IN (?) ORDER BY key FOR UPDATE', [key]),
          ])
        : await this.prepared(
            'ceiling_media',
            'SELECT record FROM media WHERE key IN ($1) ORDER BY key FOR UPDATE',
            [key],
          );
    let media = this.one<Json>(mediaRows);
    const devices = (
      await this.prepared(
        'ceiling_media_devices',
        'SELECT record FROM devices WHERE media_key IN ($1) ORDER BY host, address FOR UPDATE',
        [key],
      )
    ).map((r) => JSON.parse(r.record) as Json);
    // The domain's own settle (domain/media.ts), as usecases/media.ts calls it: the same decision and CPU.
    media = settleInDomain(media as unknown as MediaState, devices as unknown as DeviceRecord[], at)
      .media as unknown as Json;
    media = { ...media, updatedAt: at };
    await this.string([
      this.sql(`INSERT INTO media (key, record, host) VALUES (?, ?, ?) ${MEDIA_UPSERT}`, [
        key,
        JSON.stringify(media),
        media.host,
      ]),
      `SELECT pg_advisory_xact_lock_shared(${EVENT_LOCK})`,
      `INSERT INTO device_events (device_uuid, removed, record, at) VALUES (${lit(d.uuid)}, FALSE, ${lit(JSON.stringify(d))}, ${lit(at)})`,
      'COMMIT',
    ]);
  }
}
