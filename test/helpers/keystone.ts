/**
 * A real OpenStack Keystone (Debian's python3-keystone, Keystone 22 "Zed") for
 * tests, started as ../shared/notes/openstack.md shows: a temporary directory
 * with keystone.conf (SQLite, fernet tokens, the key repositories in the
 * directory), `keystone-manage db_sync`, `fernet_setup`, `credential_setup`
 * and `bootstrap` (admin / admin project / RegionOne, and the default roles
 * reader < member < admin), then `keystone-wsgi-public` on 127.0.0.1 at a
 * free port. The four keystone-manage commands run in one Python process
 * (keystone's own `cli.main`, once per command): each interpreter start costs
 * seconds on a loaded machine. Start one per test file.
 *
 * `tokenExpirationSeconds` is keystone.conf's `[token] expiration`, for tests
 * of expiry. Passwords are hashed with bcrypt's fewest rounds (4) to keep
 * token requests quick.
 *
 * The other helpers speak Keystone's v3 REST API with the admin's token, as
 * `openstack project|user|role|application credential create` would: projects,
 * users with roles on projects, a service user, application credentials,
 * tokens and their revocation. `down()` / `up()` stop and restart the server
 * on the same port (the database stays): Keystone away and back.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { tempDir } from './agent.js';
import { KEYSTONE_WSGI, PYTHON } from './prerequisites.js';
import { freePort } from './processes.js';

const run = promisify(execFile);

export const KEYSTONE_ADMIN_PASSWORD = 'keystone-admin-secret';

/** keystone-manage's four commands in one interpreter (as /usr/bin/keystone-manage runs each). */
const PREPARE = `
import sys
from keystone.cmd import cli
from keystone.conf import CONF
conf, password, url, db = sys.argv[1:5]
for cmd in (['db_sync'],
            ['fernet_setup', '--keystone-user', 'root', '--keystone-group', 'root'],
            ['credential_setup', '--keystone-user', 'root', '--keystone-group', 'root'],
            ['bootstrap', '--bootstrap-password', password, '--bootstrap-admin-url', url,
             '--bootstrap-internal-url', url, '--bootstrap-public-url', url,
             '--bootstrap-region-id', 'RegionOne']):
    CONF.reset()
    CONF.unregister_opt(cli.command_opt)
    cli.main(argv=['keystone-manage', '--config-file', conf] + cmd)
# In SQLite's default journal mode a write of keystone-wsgi-public (POST /v3/roles
# right after GET /v3/roles) failed with "database is locked"; in WAL mode
# readers do not block the writer.
import sqlite3
sqlite3.connect(db).execute('PRAGMA journal_mode=WAL').fetchall()
`;

export interface KeystoneUser {
  id: string;
  name: string;
  password: string;
}

export interface KeystoneToken {
  token: string;
  /** token.expires_at, in ms since the epoch. */
  expiresAt: number;
}

export interface KeystoneServer {
  /** http://127.0.0.1:PORT/v3 */
  url: string;
  port: number;
  dir: string;
  /** One call with the admin's token (or `token`); the status, headers and parsed body. */
  call<T = Record<string, unknown>>(
    method: string,
    path: string,
    body?: unknown,
    token?: string,
    headers?: Record<string, string>,
  ): Promise<{ status: number; headers: Headers; body: T }>;
  /** A project in the default domain; its id. */
  createProject(name: string): Promise<string>;
  /** A role by name (created when Keystone has none, e.g. `service`); its id. */
  role(name: string): Promise<string>;
  /** A user in the default domain with `roles` on `project` (a project id). */
  createUser(name: string, project: string, roles: string[]): Promise<KeystoneUser>;
  /** A token for `user` scoped to `project` (a project id), by password. */
  issue(user: KeystoneUser, project: string): Promise<KeystoneToken>;
  /** An application credential of `user` on `project`, made with the user's own token (Keystone's policy). */
  createAppCredential(
    user: KeystoneUser,
    project: string,
    name: string,
    roles?: string[],
  ): Promise<{ id: string; name: string; secret: string }>;
  /** DELETE /v3/auth/tokens: Keystone revokes the token. */
  revoke(token: string): Promise<void>;
  /** Keystone's server output (its log), e.g. for a failure message. */
  log(): string;
  /** Stops the server; the database and keys stay (Keystone down). */
  down(): Promise<void>;
  /** Starts it again on the same port. */
  up(): Promise<void>;
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

async function expect2xx<R extends { status: number; body: unknown }>(
  what: string,
  r: Promise<R>,
): Promise<R> {
  const res = await r;
  if (res.status < 200 || res.status >= 300) {
    throw new Error(`Keystone: ${what}: ${res.status} ${JSON.stringify(res.body)}`);
  }
  return res;
}

export async function startKeystoneServer(
  options: { tokenExpirationSeconds?: number } = {},
): Promise<KeystoneServer> {
  const dir = await tempDir('berth-keystone-');
  const conf = join(dir.path, 'keystone.conf');
  const db = join(dir.path, 'keystone.sqlite');
  await mkdir(join(dir.path, 'fernet'));
  await mkdir(join(dir.path, 'cred'));
  await writeFile(
    conf,
    [
      '[DEFAULT]',
      'use_stderr = true',
      '[database]',
      `connection = sqlite:///${db}`,
      '[fernet_tokens]',
      `key_repository = ${join(dir.path, 'fernet')}`,
      '[credential]',
      `key_repository = ${join(dir.path, 'cred')}`,
      '[token]',
      'provider = fernet',
      `expiration = ${options.tokenExpirationSeconds ?? 3600}`,
      '[identity]',
      'password_hash_rounds = 4',
      '',
    ].join('\n'),
  );
  const env = { ...process.env, OS_KEYSTONE_CONFIG_DIR: dir.path };
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/v3`;
  try {
    await run(PYTHON, ['-c', PREPARE, conf, KEYSTONE_ADMIN_PASSWORD, url, db], {
      env,
      cwd: dir.path,
      timeout: 180_000,
    });
  } catch (err) {
    await dir.cleanup();
    const e = err as { stderr?: string; message: string };
    throw new Error(`keystone-manage failed: ${(e.stderr ?? e.message).slice(-4000)}`);
  }

  let output = '';
  let proc: ChildProcess | null = null;
  const up = async () => {
    const p = spawn(KEYSTONE_WSGI, ['--port', String(port), '--host', '127.0.0.1'], {
      env,
      cwd: dir.path,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    live.add(p);
    const exited = new Promise<number | null>((resolve) => p.once('exit', (code) => resolve(code)));
    const keep = (b: Buffer) => {
      output = (output + b.toString()).slice(-512 * 1024);
    };
    p.stdout?.on('data', keep);
    p.stderr?.on('data', keep);
    const deadline = Date.now() + 120_000;
    let ok = false;
    while (!ok && Date.now() < deadline) {
      const gone = await Promise.race([
        exited,
        new Promise<'running'>((r) => setTimeout(() => r('running'), 200)),
      ]);
      if (gone !== 'running') break;
      ok = await fetch(url)
        .then((r) => r.ok)
        .catch(() => false);
    }
    if (!ok) {
      p.kill('SIGKILL');
      live.delete(p);
      throw new Error(`keystone-wsgi-public did not start on ${url}:\n${output.slice(-4000)}`);
    }
    proc = p;
  };
  const down = async () => {
    const p = proc;
    if (!p) return;
    proc = null;
    p.kill('SIGTERM');
    await new Promise((r) => {
      if (p.exitCode !== null || p.signalCode !== null) r(null);
      else p.once('exit', r);
      setTimeout(() => p.kill('SIGKILL'), 5_000).unref();
    });
    live.delete(p);
  };
  try {
    await up();
  } catch (err) {
    await dir.cleanup();
    throw err;
  }

  const raw = async <T>(
    method: string,
    path: string,
    body: unknown,
    token: string | null,
    extra: Record<string, string> = {},
  ) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        ...extra,
        accept: 'application/json',
        ...(token ? { 'x-auth-token': token } : {}),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    let parsed: unknown = {};
    try {
      parsed = text ? JSON.parse(text) : {};
    } catch {
      // wsgiref's "A server error occurred" is text: keep it, with the server's log, for the message.
      parsed = { text, log: output.slice(-3000) };
    }
    return { status: res.status, headers: res.headers, body: parsed as T };
  };
  const passwordAuth = (
    user: { name: string; password: string },
    project: { id?: string; name?: string },
  ) => ({
    auth: {
      identity: {
        methods: ['password'],
        password: { user: { name: user.name, domain: { id: 'default' }, password: user.password } },
      },
      scope: { project: project.id ? { id: project.id } : { name: project.name, domain: { id: 'default' } } },
    },
  });
  const tokenFrom = (r: { headers: Headers; body: { token?: { expires_at?: string } } }): KeystoneToken => ({
    token: r.headers.get('x-subject-token') ?? '',
    expiresAt: Date.parse(r.body.token?.expires_at ?? ''),
  });
  let admin: KeystoneToken | null = null;
  const adminToken = async () => {
    if (!admin || admin.expiresAt - Date.now() < 3_000) {
      const r = await expect2xx(
        'the admin token',
        raw<{ token?: { expires_at?: string } }>(
          'POST',
          '/auth/tokens',
          passwordAuth({ name: 'admin', password: KEYSTONE_ADMIN_PASSWORD }, { name: 'admin' }),
          null,
        ),
      );
      admin = tokenFrom(r);
    }
    return admin.token;
  };
  const call = async <T>(
    method: string,
    path: string,
    body?: unknown,
    token?: string,
    headers?: Record<string, string>,
  ) => raw<T>(method, path, body, token ?? (await adminToken()), headers);
  const roles = new Map<string, string>();
  const role = async (name: string) => {
    const known = roles.get(name);
    if (known) return known;
    const list = await expect2xx(
      `roles named ${name}`,
      call<{ roles: Array<{ id: string }> }>('GET', `/roles?name=${encodeURIComponent(name)}`),
    );
    const id =
      list.body.roles[0]?.id ??
      (await expect2xx(`role ${name}`, call<{ role: { id: string } }>('POST', '/roles', { role: { name } })))
        .body.role.id;
    roles.set(name, id);
    return id;
  };
  const issue = async (user: KeystoneUser, project: string) => {
    const r = await expect2xx(
      `a token for ${user.name}`,
      raw<{ token?: { expires_at?: string } }>(
        'POST',
        '/auth/tokens',
        passwordAuth(user, { id: project }),
        null,
      ),
    );
    return tokenFrom(r);
  };

  return {
    url,
    port,
    dir: dir.path,
    call,
    role,
    async createProject(name) {
      const r = await expect2xx(
        `project ${name}`,
        call<{ project: { id: string } }>('POST', '/projects', { project: { name, domain_id: 'default' } }),
      );
      return r.body.project.id;
    },
    async createUser(name, project, userRoles) {
      const password = `${name}-password`;
      const r = await expect2xx(
        `user ${name}`,
        call<{ user: { id: string } }>('POST', '/users', {
          user: { name, password, domain_id: 'default', default_project_id: project },
        }),
      );
      for (const rn of userRoles) {
        await expect2xx(
          `role ${rn} for ${name}`,
          call('PUT', `/projects/${project}/users/${r.body.user.id}/roles/${await role(rn)}`),
        );
      }
      return { id: r.body.user.id, name, password };
    },
    issue,
    async createAppCredential(user, project, name, credRoles) {
      const own = (await issue(user, project)).token;
      const r = await expect2xx(
        `application credential ${name}`,
        raw<{ application_credential: { id: string; name: string; secret: string } }>(
          'POST',
          `/users/${user.id}/application_credentials`,
          {
            application_credential: {
              name,
              ...(credRoles ? { roles: credRoles.map((n) => ({ name: n })) } : {}),
            },
          },
          own,
        ),
      );
      return r.body.application_credential;
    },
    async revoke(token) {
      const res = await fetch(`${url}/auth/tokens`, {
        method: 'DELETE',
        headers: { 'x-auth-token': await adminToken(), 'x-subject-token': token },
      });
      if (res.status !== 204)
        throw new Error(`Keystone: revoking a token: ${res.status} ${await res.text()}`);
    },
    log: () => output,
    down,
    async up() {
      await up();
      admin = null;
    },
    async stop() {
      await down();
      await dir.cleanup();
    },
  };
}
