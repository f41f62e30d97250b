/**
 * Exactly one accelerator-request-bound event per bind with two scheduler
 * replicas on one PostgreSQL database (issue 40, docs/decisions.md 77). Two
 * `berth scheduler serve` processes serve the Cyborg API and both run a Nova
 * event sender; a simulated host's agent, a real Placement, and a Nova
 * stand-in that counts the events it took (answered 200), by ARQ.
 *
 * - Binds through the replicas: each bind's event is taken once, and nothing
 *   stays owed (so nothing can be sent again).
 * - The sender of an event is SIGKILLed while Nova holds its request (not
 *   answered): the other replica takes the event over once the claim
 *   expired, and Nova takes it once.
 * - The one edge where Nova is told twice: the sender is frozen (SIGSTOP)
 *   after Nova took its event and before it recorded the delivery, then
 *   killed; the other replica sends it again. Exactly that event is taken
 *   twice, every other once.
 */
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildSimHost } from '../../src/sim/host.js';
import { VF_CLASS, vfHostDefinition } from '../helpers/invariants.js';
import { type PlacementServer, startPlacementServer } from '../helpers/placement.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { available, placementApi, postgresServer } from '../helpers/prerequisites.js';
import { agentProcess, BerthProcess, freePort, stopAllProcesses } from '../helpers/processes.js';
import { eventually } from '../helpers/wait.js';

const usable =
  available(postgresServer(), 'Nova events from two replicas') &&
  available(placementApi(), 'Nova events from two replicas');

const HOST = 'events-host';
const VFS = 12;
/** Nova's answer may take this long (the Cyborg API's `timeout`), and a claim lasts 4 × that. */
const TIMEOUT_S = 2;
const CLAIM_TTL_S = 8;

type Name = 'A' | 'B';

/** Nova's os-server-external-events, counting what it took by ARQ (the event's tag). */
class CountingNova {
  private server: Server | null = null;
  url = '';
  /** Every request, in order: its tags, and whether Nova answered 200 ('took') or never answered. */
  readonly requests: Array<{ tags: string[]; statuses: string[]; took: boolean }> = [];
  /** The next request is held (not answered) and handed to this. */
  private holdNext:
    | ((held: { tags: string[]; res: ServerResponse; entry: { took: boolean } }) => void)
    | null = null;

  async start(): Promise<void> {
    this.server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let text = '';
      req.on('data', (c) => (text += c));
      req.on('end', () => {
        const events = (JSON.parse(text) as { events: Array<{ tag: string; status: string }> }).events;
        const entry = { tags: events.map((e) => e.tag), statuses: events.map((e) => e.status), took: false };
        this.requests.push(entry);
        const hold = this.holdNext;
        if (hold) {
          this.holdNext = null;
          hold({ tags: entry.tags, res, entry });
          return;
        }
        this.answer(res, entry);
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    const a = this.server.address();
    this.url = `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}/v2.1`;
  }

  /** Nova takes the request's events. */
  answer(res: ServerResponse, entry: { took: boolean }): void {
    entry.took = true;
    res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"events": []}');
  }

  /** Resolves with the next request, held unanswered. */
  hold(): Promise<{ tags: string[]; res: ServerResponse; entry: { took: boolean } }> {
    return new Promise((resolve) => {
      this.holdNext = resolve;
    });
  }

  /** How many times Nova took each ARQ's event. */
  taken(): Map<string, number> {
    const n = new Map<string, number>();
    for (const r of this.requests) if (r.took) for (const t of r.tags) n.set(t, (n.get(t) ?? 0) + 1);
    return n;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}

describe.skipIf(!usable)('Nova events from two scheduler replicas on PostgreSQL (child processes)', () => {
  let pgServer: PostgresServer;
  let placement: PlacementServer;
  let db: pg.Client;
  let dir: string;
  const nova = new CountingNova();
  const replicas = {} as Record<Name, BerthProcess>;
  /** The provider of the host's PF: Placement counts its VFs there, and a bind picks a free one. */
  let provider = '';
  const idOf = (n: Name) => String(replicas[n].listening.scheduler_id);
  const cyborgOf = (n: Name) => String(replicas[n].listening.cyborg);

  /** One call to replica `n`'s Cyborg API (noauth: the token names user:project), as Nova with its service token. */
  async function http(n: Name, method: string, path: string, body?: unknown, token = 'alice:proj-a') {
    const res = await fetch(`${cyborgOf(n)}${path}`, {
      method,
      headers: {
        'X-Auth-Token': token,
        'X-Service-Token': 'nova',
        'OpenStack-API-Version': 'accelerator 2.0',
        ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  }

  /**
   * Nova's bind of a new ARQ to a new instance on the host's provider, through
   * whichever live replica follows the host (only it knows the host's
   * providers; after a kill, once the other adopted it); the ARQ's uuid.
   */
  async function bind(): Promise<string> {
    let bound = '';
    await eventually(
      async () => {
        for (const n of ['A', 'B'] as const) {
          if (!replicas[n].running) continue;
          const made = await http(n, 'POST', '/accelerator_requests', { device_profile_name: 'vf' });
          expect(made.status, JSON.stringify(made.body)).toBe(201);
          const uuid = (made.body.arqs as Array<{ uuid: string }>)[0]!.uuid;
          const patched = await http(n, 'PATCH', '/accelerator_requests', {
            [uuid]: [
              { path: '/hostname', op: 'add', value: HOST },
              { path: '/device_rp_uuid', op: 'add', value: provider },
              { path: '/instance_uuid', op: 'add', value: randomUUID() },
            ],
          });
          if (patched.status === 202) {
            bound = uuid;
            return true;
          }
          expect(JSON.stringify(patched.body)).toContain('is not the Placement provider');
          expect((await http(n, 'DELETE', `/accelerator_requests/${uuid}`)).status).toBe(204);
        }
        return false;
      },
      (ok) => ok,
      60_000,
    );
    return bound;
  }

  /** Events the database says are still owed (claimed or not). */
  const owed = async () =>
    Number((await db.query('SELECT COUNT(*) AS n FROM arqs WHERE nova_event IS NOT NULL')).rows[0].n);
  /** Which replica's claim holds ARQ `uuid`'s event. */
  const claimant = async (uuid: string): Promise<Name> => {
    const owner = (await db.query('SELECT nova_claim_owner AS o FROM arqs WHERE uuid = $1', [uuid])).rows[0]
      ?.o;
    const n = (['A', 'B'] as const).find((x) => idOf(x) === owner);
    if (!n) throw new Error(`ARQ ${uuid}'s event is claimed by ${owner}, not by a replica`);
    return n;
  };
  /** Every event taken exactly `times(tag)` times, and nothing owed any more: nothing can be sent again. */
  async function settled(tags: string[], times: (tag: string) => number = () => 1): Promise<void> {
    await eventually(
      async () => ({ owed: await owed(), taken: tags.map((t) => nova.taken().get(t) ?? 0) }),
      (s) => s.owed === 0 && s.taken.every((k, i) => k >= times(tags[i]!)),
      60_000,
    );
    expect(tags.map((t) => nova.taken().get(t) ?? 0)).toEqual(tags.map(times));
    expect(nova.requests.flatMap((r) => r.statuses).every((s) => s === 'completed')).toBe(true);
  }

  beforeAll(async () => {
    pgServer = await startPostgres();
    const url = await pgServer.createDatabase(
      `berth_${createHash('sha256').update('nova-events').digest('hex').slice(0, 12)}`,
    );
    db = new pg.Client({ connectionString: url });
    await db.connect();
    placement = await startPlacementServer();
    await nova.start();
    dir = mkdtempSync(join(tmpdir(), 'berth-nova-events-'));
    await writeFile(
      join(dir, 'cyborg.yaml'),
      [
        'listen: 127.0.0.1:0',
        'auth: {type: noauth}',
        `nova: {url: "${nova.url}", auth: {type: noauth}, claim_ttl: ${CLAIM_TTL_S}}`,
        `timeout: ${TIMEOUT_S}`,
        'retry_max: 0.5',
      ].join('\n'),
    );
    await writeFile(join(dir, 'placement.yaml'), 'poll_interval: 0.2\nretry_max: 0.5\ntimeout: 3\n');
    for (const n of ['A', 'B'] as const) {
      replicas[n] = new BerthProcess({
        name: `scheduler ${n}`,
        args: [
          'scheduler',
          'serve',
          '--db',
          url,
          '--listen',
          `127.0.0.1:${await freePort()}`,
          '--insecure-no-auth',
          '--placement-url',
          placement.url,
          '--placement-auth',
          'noauth',
          '--placement-create-roots',
          '--placement-config',
          join(dir, 'placement.yaml'),
          '--cyborg-config',
          join(dir, 'cyborg.yaml'),
        ],
      });
      await replicas[n].start();
    }
    const sim = await buildSimHost(join(dir, 'host'), vfHostDefinition(HOST, VFS));
    // The agent lists both: after a kill the other replica adopts the host (and knows its provider).
    const agent = await agentProcess(sim, { scheduler: [replicas.A.endpoint, replicas.B.endpoint] });
    await agent.start();
    // Until Berth reported them, Placement knows neither the resource class nor the provider (400).
    provider = (
      await eventually(
        async () =>
          (
            await placement.call<{ resource_providers?: Array<{ uuid: string }> }>(
              'GET',
              `/resource_providers?resources=${VF_CLASS}:${VFS}`,
            )
          ).body.resource_providers?.map((p) => p.uuid) ?? [],
        (list) => list.length === 1,
        60_000,
      )
    )[0]!;
    const made = await http(
      'A',
      'POST',
      '/device_profiles',
      [{ name: 'vf', groups: [{ [`resources:${VF_CLASS}`]: '1' }] }],
      'admin',
    );
    expect(made.status, JSON.stringify(made.body)).toBe(201);
  }, 240_000);

  afterAll(async () => {
    await stopAllProcesses();
    await db?.end();
    await nova.stop();
    await placement?.stop();
    await pgServer?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('each bind through the replicas is told to Nova once', async () => {
    const arqs: string[] = [];
    for (let i = 0; i < 5; i++) arqs.push(await bind());
    await settled(arqs);
  }, 120_000);

  it('a sender killed while Nova holds its request: the other replica takes the event over when the claim expires; Nova takes it once', async () => {
    const held = nova.hold();
    const arq = await bind();
    const request = await held;
    expect(request.tags).toEqual([arq]);
    const sender = await claimant(arq);
    const other: Name = sender === 'A' ? 'B' : 'A';
    const killedAt = Date.now();
    await replicas[sender].kill('SIGKILL');
    // Never answered: the request died with its sender.
    await settled([arq]);
    expect(request.entry.took).toBe(false);
    const sends = nova.requests.filter((r) => r.tags.includes(arq));
    expect(sends).toHaveLength(2);
    // Taken over only once the dead sender's claim expired.
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(CLAIM_TTL_S * 1000 - 2_000);
    expect(replicas[other].running).toBe(true);
    await replicas[sender].restart();
  }, 120_000);

  it('the one edge: the sender dies after Nova took its event, before it recorded it; told twice, that event alone', async () => {
    const others = [await bind(), await bind()];
    await settled(others);
    const before = nova.requests.length;
    const held = nova.hold();
    const arq = await bind();
    const request = await held;
    expect(request.tags).toEqual([arq]);
    const sender = await claimant(arq);
    // Frozen, then Nova takes the event, then the sender dies without reading the answer.
    replicas[sender].signal('SIGSTOP');
    nova.answer(request.res, request.entry);
    await replicas[sender].kill('SIGKILL');
    // The other replica sends it again once the claim expired: the one duplicate, and only it.
    await settled([...others, arq], (t) => (t === arq ? 2 : 1));
    expect(nova.requests.slice(before).filter((r) => r.tags.includes(arq) && r.took)).toHaveLength(2);
  }, 120_000);
});
