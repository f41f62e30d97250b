/**
 * A real OpenStack Placement (Debian's placement-api 8.0.0) for tests: a
 * temporary directory with its configuration (auth_strategy noauth2, a SQLite
 * database), `placement-manage db sync`, then `placement-api` on 127.0.0.1 at a
 * free port. It answers in a few seconds; share one per test file.
 *
 * With noauth2 the X-Auth-Token is the user, and `admin` is an admin. The
 * `as*` helpers speak to it as Nova or an operator would (any microversion).
 *
 * `keystone` makes it authenticate as a real cloud does instead
 * (`auth_strategy = keystone`, keystonemiddleware's `[keystone_authtoken]`
 * with Placement's own service user at a real Keystone, test/helpers/keystone.ts);
 * the `call` helpers then send `keystone.token()`, and the CLI helper is not
 * available.
 *
 * `standardTraits` adds traits to Placement's table of standard traits before
 * it starts, as a Placement built with a newer os-traits has them: Debian's
 * os-traits 2.9.0 predates HW_PCI_ONE_TIME_USE and HW_PCI_LIVE_MIGRATABLE
 * (Nova 2025.1), and only Placement's own trait sync may create non-CUSTOM
 * traits (it inserts what os-traits lists and never removes a row).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import type { PlacementOptions } from '../../src/server/scheduler/placement/config.js';
import { tempDir } from './agent.js';
import { OPENSTACK_CLI, PLACEMENT_API, PLACEMENT_MANAGE } from './prerequisites.js';
import { freePort } from './processes.js';

const run = promisify(execFile);

export interface PlacementServer {
  /** http://127.0.0.1:PORT */
  url: string;
  port: number;
  dir: string;
  /** One call as the admin, at `microversion` (default 1.39); returns status and parsed body. */
  call<T = Record<string, unknown>>(
    method: string,
    path: string,
    body?: unknown,
    microversion?: string,
  ): Promise<{ status: number; body: T }>;
  /** The same as `call`, but a non-2xx status throws with Placement's answer. */
  ok<T = Record<string, unknown>>(
    method: string,
    path: string,
    body?: unknown,
    microversion?: string,
  ): Promise<T>;
  /** `openstack --os-placement-api-version 1.39 … -f json` against this Placement (osc-placement). */
  openstack<T = unknown>(args: string[]): Promise<T>;
  /** Requests seen in placement-api's access log (its stderr), e.g. to wait for one. */
  log(): string;
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

/** Placement's own service user at Keystone (keystonemiddleware's [keystone_authtoken]). */
export interface PlacementKeystone {
  /** Keystone's …/v3. */
  authUrl: string;
  username: string;
  password: string;
  /** The service user's project, by name in the default domain. */
  project: string;
  /** A token the tests' own calls send (an admin's). */
  token: () => Promise<string>;
}

export async function startPlacementServer(
  options: { standardTraits?: string[]; keystone?: PlacementKeystone } = {},
): Promise<PlacementServer> {
  const dir = await tempDir('berth-placement-');
  const db = join(dir.path, 'placement.sqlite');
  const conf = join(dir.path, 'placement.conf');
  const ks = options.keystone;
  const auth = ks
    ? [
        '[api]',
        'auth_strategy = keystone',
        '[keystone_authtoken]',
        `www_authenticate_uri = ${ks.authUrl}`,
        `auth_url = ${ks.authUrl}`,
        'auth_type = password',
        `username = ${ks.username}`,
        `password = ${ks.password}`,
        `project_name = ${ks.project}`,
        'user_domain_id = default',
        'project_domain_id = default',
        'interface = public',
      ]
    : ['[api]', 'auth_strategy = noauth2'];
  await writeFile(
    conf,
    [
      '[DEFAULT]',
      'use_stderr = true',
      ...auth,
      '[placement_database]',
      `connection = sqlite:///${db}`,
      '',
    ].join('\n'),
  );
  const env = { ...process.env, OS_PLACEMENT_CONFIG_DIR: dir.path };
  await run(PLACEMENT_MANAGE, ['--config-file', conf, 'db', 'sync'], { env, timeout: 60_000 });
  if (options.standardTraits?.length) {
    const sql = new Database(db);
    try {
      const now = new Date().toISOString().replace('T', ' ').replace('Z', '');
      const ins = sql.prepare('INSERT INTO traits (name, created_at) VALUES (?, ?)');
      for (const t of options.standardTraits) ins.run(t, now);
    } finally {
      sql.close();
    }
  }
  let output = '';
  let child: ChildProcess | null = null;
  let port = 0;
  // A port taken between freePort() and the bind makes placement-api exit: try another.
  for (let attempt = 0; attempt < 5 && !child; attempt++) {
    port = await freePort();
    const p = spawn(PLACEMENT_API, ['--port', String(port), '--host', '127.0.0.1'], {
      env,
      cwd: dir.path,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    live.add(p);
    const exited = new Promise<number | null>((resolve) => p.once('exit', (code) => resolve(code)));
    p.stdout?.on('data', (b: Buffer) => {
      output += b.toString();
    });
    p.stderr?.on('data', (b: Buffer) => {
      output = (output + b.toString()).slice(-512 * 1024);
    });
    const url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 30_000;
    let up = false;
    while (Date.now() < deadline) {
      const gone = await Promise.race([
        exited,
        new Promise<'running'>((r) => setTimeout(() => r('running'), 100)),
      ]);
      if (gone !== 'running') break;
      up = await fetch(`${url}/`)
        .then((r) => r.ok)
        .catch(() => false);
      if (up) break;
    }
    if (up) child = p;
    else {
      p.kill('SIGKILL');
      live.delete(p);
    }
  }
  if (!child) {
    await dir.cleanup();
    throw new Error(`placement-api did not start:\n${output.slice(-4000)}`);
  }
  const url = `http://127.0.0.1:${port}`;
  const proc = child;
  const call = async <T>(method: string, path: string, body?: unknown, microversion = '1.39') => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        'x-auth-token': ks ? await ks.token() : 'admin',
        'openstack-api-version': `placement ${microversion}`,
        accept: 'application/json',
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : {}) as T };
  };
  return {
    url,
    port,
    dir: dir.path,
    call,
    async ok<T>(method: string, path: string, body?: unknown, microversion?: string) {
      const r = await call<T>(method, path, body, microversion);
      if (r.status < 200 || r.status >= 300) {
        throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
      }
      return r.body;
    },
    async openstack<T>(args: string[]) {
      if (ks) throw new Error('placement.openstack: only for a Placement with noauth2');
      const { stdout } = await run(
        OPENSTACK_CLI,
        [
          '--os-auth-type',
          'admin_token',
          '--os-token',
          'admin',
          '--os-endpoint',
          url,
          '--os-placement-api-version',
          '1.39',
          ...args,
          '-f',
          'json',
        ],
        { timeout: 60_000 },
      );
      return JSON.parse(stdout) as T;
    },
    log: () => output,
    async stop() {
      proc.kill('SIGTERM');
      await new Promise((r) => {
        if (proc.exitCode !== null) r(null);
        else proc.once('exit', r);
        setTimeout(() => proc.kill('SIGKILL'), 5_000).unref();
      });
      live.delete(proc);
      await dir.cleanup();
    },
  };
}

/** Providers, inventories and traits as Placement shows them: what tests compare. */
export interface ProviderView {
  uuid: string;
  name: string;
  generation: number;
  parent: string | null;
  traits: string[];
  inventories: Record<string, { total: number; reserved: number; max_unit: number }>;
}

export async function providerView(p: PlacementServer, name: string): Promise<ProviderView | null> {
  const list = await p.ok<{
    resource_providers: Array<{ uuid: string; generation: number; parent_provider_uuid: string | null }>;
  }>('GET', `/resource_providers?name=${encodeURIComponent(name)}`);
  const rp = list.resource_providers[0];
  if (!rp) return null;
  // The provider may go between the reads (Berth deletes it): then it is gone.
  const traits = await p.call<{ traits: string[] }>('GET', `/resource_providers/${rp.uuid}/traits`);
  const inv = await p.call<{
    inventories: ProviderView['inventories'];
    resource_provider_generation: number;
  }>('GET', `/resource_providers/${rp.uuid}/inventories`);
  if (traits.status === 404 || inv.status === 404) return null;
  if (traits.status !== 200 || inv.status !== 200) {
    throw new Error(
      `provider ${name}: ${traits.status} ${JSON.stringify(traits.body)} / ${inv.status} ${JSON.stringify(inv.body)}`,
    );
  }
  return {
    uuid: rp.uuid,
    name,
    generation: inv.body.resource_provider_generation,
    parent: rp.parent_provider_uuid,
    traits: [...traits.body.traits].sort(),
    inventories: inv.body.inventories,
  };
}

/**
 * The Placement settings the tests run the scheduler with: report mode, noauth
 * as admin, roots created, quick polls and retries; `over` changes any of them.
 */
export const testPlacementOptions = (
  url: string | null,
  over: Partial<PlacementOptions> = {},
): PlacementOptions => ({
  url,
  auth: { type: 'noauth', user: 'admin' },
  mode: 'report',
  createRoots: true,
  computeNodes: {},
  pollSeconds: 0.2,
  resyncSeconds: 3600,
  // Drift is the concern of placement-drift.test.ts; elsewhere a writer's change must meet Berth's 409.
  driftSeconds: 3600,
  timeoutSeconds: 3,
  retryMaxSeconds: 0.5,
  ...over,
});
