/**
 * Placement reporting in the fleet bench (issue 42 item 2): the scheduler's
 * peak RSS with Placement reporting configured, over its start, the
 * reporter's first read of the fleet and a window of writes.
 *
 * Placement is a stand-in here, not placement-api: a million devices are a
 * million providers (and ~4 million calls) that the real one, on SQLite,
 * writes at a few hundred a second — hours. The figure is the scheduler's
 * memory, not Placement's, so the stand-in answers every call the reporter
 * makes (versions, providers, traits, inventories, allocations, resource
 * classes) as an empty Placement that accepts every write would, and holds
 * nothing: no provider is ever found again, so the reporter keeps writing.
 * It counts the calls, so the bench knows the reporter got past its start.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SchedulerClient } from '../src/client/sdk.js';
import { BerthProcess, freePort } from '../test/helpers/processes.js';
import { nowMs, round, sleep } from './lib.js';

interface StandIn {
  url: string;
  /** Inventories written (one a provider written in full). */
  inventories: number;
  calls: number;
  close(): Promise<void>;
}

function send(res: ServerResponse, status: number, body?: unknown): void {
  const text = body === undefined ? '' : JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'openstack-api-version': 'placement 1.39',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

async function bodyOf(req: IncomingMessage): Promise<Record<string, unknown>> {
  const parts: Buffer[] = [];
  for await (const c of req) parts.push(c as Buffer);
  const text = Buffer.concat(parts).toString();
  return text ? (JSON.parse(text) as Record<string, unknown>) : {};
}

/** An empty Placement that accepts every write and keeps none of it. */
async function startStandIn(): Promise<StandIn> {
  const s: StandIn = { url: '', inventories: 0, calls: 0, close: async () => {} };
  const server = createServer((req, res) => {
    s.calls++;
    void (async () => {
      const body = await bodyOf(req);
      const path = (req.url ?? '/').split('?')[0]!;
      const m = req.method ?? 'GET';
      const gen = Number(body.resource_provider_generation ?? 0) + 1;
      if (path === '/' && m === 'GET') {
        return send(res, 200, {
          versions: [{ id: 'v1.0', min_version: '1.0', max_version: '1.39', status: 'CURRENT' }],
        });
      }
      if (path === '/resource_providers' && m === 'GET') return send(res, 200, { resource_providers: [] });
      if (path === '/resource_providers' && m === 'POST') {
        const parent = (body.parent_provider_uuid as string | undefined) ?? null;
        return send(res, 200, {
          uuid: body.uuid,
          name: body.name,
          generation: 0,
          parent_provider_uuid: parent,
          root_provider_uuid: parent ?? body.uuid,
        });
      }
      if (path === '/traits' && m === 'GET') return send(res, 200, { traits: [] });
      if (/^\/(traits|resource_classes)\/[^/]+$/.test(path) && m === 'PUT') return send(res, 201);
      const sub = /^\/resource_providers\/[^/]+(\/(traits|inventories|allocations))?$/.exec(path);
      if (sub) {
        const what = sub[2];
        if (!what && m === 'GET') {
          return send(res, 404, {
            errors: [{ status: 404, code: 'placement.undefined_code', detail: 'No such provider' }],
          });
        }
        if (!what && m === 'DELETE') return send(res, 204);
        if (what === 'traits' && m === 'GET')
          return send(res, 200, { traits: [], resource_provider_generation: 0 });
        if (what === 'traits' && m === 'PUT') {
          return send(res, 200, { traits: body.traits, resource_provider_generation: gen });
        }
        if (what === 'inventories' && m === 'GET') {
          return send(res, 200, { inventories: {}, resource_provider_generation: 0 });
        }
        if (what === 'inventories' && m === 'PUT') {
          s.inventories++;
          return send(res, 200, { inventories: body.inventories, resource_provider_generation: gen });
        }
        if (what === 'allocations' && m === 'GET') {
          return send(res, 200, { allocations: {}, resource_provider_generation: 0 });
        }
      }
      send(res, 404, { errors: [{ status: 404, code: 'placement.undefined_code', detail: `${m} ${path}` }] });
    })().catch((err: Error) => send(res, 400, { errors: [{ status: 400, detail: err.message }] }));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  s.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  s.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return s;
}

export interface PlacementPoint {
  /** The scheduler's VmHWM over its start, the reporter's start and the window. */
  placement_peak_rss_mib: number;
  /** From the process's start to the reporter's fleet read (its status shows the store's revision). */
  placement_loaded_s: number;
  /** From the process's start to the reporter's first provider written in full (NaN: none expected). */
  placement_first_write_s: number;
  /** Providers written in full (their inventories) by the end of the window. */
  placement_providers_written: number;
}

/**
 * `berth scheduler serve` over `db` reporting to the stand-in (noauth,
 * --placement-create-roots: no Nova), until the reporter read the fleet and,
 * with `writes`, wrote its first providers, then for `windowS` seconds;
 * `peak(pid)` reads VmHWM. Without agents, a scheduler on PostgreSQL speaks
 * for no host (each replica reports the hosts whose agent link it holds), so
 * there `writes` is false: the figure is the reporter's read of the fleet
 * and its passes, without writes.
 */
export async function placementReporting(
  db: string,
  hosts: number,
  windowS: number,
  peak: (pid: number) => number,
  writes: boolean,
): Promise<PlacementPoint> {
  const standIn = await startStandIn();
  const proc = new BerthProcess({
    name: `scheduler ${hosts} hosts, Placement`,
    args: [
      'scheduler',
      'serve',
      '--db',
      db,
      '--listen',
      `127.0.0.1:${await freePort()}`,
      '--insecure-no-auth',
      '--placement-url',
      standIn.url,
      '--placement-auth',
      'noauth',
      '--placement-create-roots',
    ],
    // On SQLite the reporter's first read of the fleet (one unit) holds the event loop before it listens.
    startTimeoutMs: 30 * 60_000,
  });
  let client: SchedulerClient | null = null;
  try {
    const t0 = nowMs();
    await proc.start();
    client = new SchedulerClient({ endpoint: proc.endpoint, timeoutMs: 60_000, retries: 1 });
    const c = client;
    // The reporter's start (reading the fleet) precedes its first write; a million devices take minutes.
    const limit = t0 + 30 * 60_000;
    const until = async (what: string, done: () => Promise<boolean>) => {
      while (!(await done())) {
        if (!proc.running) throw new Error(`placement bench: the scheduler exited\n${proc.output()}`);
        if (nowMs() > limit) throw new Error(`placement bench: ${what} not in 30 minutes`);
        await sleep(200);
      }
    };
    // Loaded: the reporter read the fleet (its revision is the feed's, > 0 after the bench's work).
    await until('the reporter read the fleet', async () => {
      const s = await c.placement.getPlacementStatus({});
      return Number(s.status?.storeRevision ?? 0) > 0;
    });
    const loadedS = (nowMs() - t0) / 1000;
    // A scheduler on PostgreSQL speaks for the hosts whose agent it holds (none here): it writes nothing.
    if (writes) await until('a provider written', async () => standIn.inventories > 0);
    const firstWriteS = (nowMs() - t0) / 1000;
    await sleep(windowS * 1000);
    if (!proc.running) throw new Error(`placement bench: the scheduler exited\n${proc.output()}`);
    return {
      placement_peak_rss_mib: round(peak(proc.pid!), 1),
      placement_loaded_s: round(loadedS, 1),
      placement_first_write_s: writes ? round(firstWriteS, 1) : Number.NaN,
      placement_providers_written: standIn.inventories,
    };
  } finally {
    client?.close();
    await proc.stop();
    await standIn.close();
  }
}
