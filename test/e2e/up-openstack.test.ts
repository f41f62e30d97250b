/**
 * `berth up --openstack` as a newcomer runs it (docs/cyborg.md "Try it"): a
 * lab Placement (Debian's placement-api, SQLite, noauth2) with Berth's
 * providers in it, the Cyborg API (noauth), and no Nova. The `openstack`
 * commands the banner prints are run as printed (through sh, with its export
 * line), by the real CLI: the providers are listed, a device profile and an
 * ARQ made, listed, and bound. Without placement-api on $PATH (a PATH of
 * every other command), it exits 2 saying what to install, and starts nothing.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/agent.js';
import { berth, cliEnv, type Running, start, stop } from '../helpers/berth-cli.js';
import { available, openstackAccelerator, openstackCli, placementApi } from '../helpers/prerequisites.js';
import { freePort } from '../helpers/processes.js';
import { eventually } from '../helpers/wait.js';

const run = promisify(execFile);
const have =
  available(placementApi(), 'berth up --openstack') &&
  available(openstackCli(), 'berth up --openstack') &&
  available(openstackAccelerator(), 'berth up --openstack');

describe('berth up --openstack', () => {
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let up: Running | undefined;

  beforeAll(async () => {
    dir = await tempDir('berth-up-openstack-');
  });
  afterAll(async () => {
    await stop(up);
    await dir?.cleanup();
  }, 30_000);

  it.skipIf(!have)(
    'starts Placement and the Cyborg API; the printed openstack commands list providers, make, list and bind an ARQ',
    async () => {
      const port = await freePort();
      const cyborgPort = await freePort();
      const stateDir = join(dir.path, 'state');
      up = start(
        [
          'up',
          '--openstack',
          '--listen',
          `127.0.0.1:${port}`,
          '--cyborg-listen',
          `127.0.0.1:${cyborgPort}`,
          '--state-dir',
          stateDir,
        ],
        cliEnv(join(dir.path, 'client.yaml')),
      );
      await up.waitFor(/Stop with Ctrl-C/, 180_000);
      const out = up.stdout();
      expect(out).toMatch(/^ {2}placement {2}http:\/\/127\.0\.0\.1:\d+ {3}\(report, noauth/m);
      expect(out).toContain(
        `  cyborg     http://127.0.0.1:${cyborgPort}/v2   (noauth: X-Auth-Token is user[:project]; no Nova (--nova-url): binds run, no event is sent)`,
      );
      // The commands, as printed: the export line, then one openstack command a line.
      const lines = out.split('\n');
      const from = lines.findIndex((l) => l.startsWith('OpenStack, in another terminal'));
      expect(from, out).toBeGreaterThan(0);
      const printed = lines
        .slice(from + 1)
        .filter((l) => l.startsWith('  '))
        .map((l) => l.trim());
      expect(printed[0]).toBe('export OS_AUTH_TYPE=admin_token OS_TOKEN=admin');
      const command = (what: RegExp) => {
        const c = printed.find((l) => what.test(l));
        if (!c) throw new Error(`no printed command matching ${what}:\n${out}`);
        return c;
      };
      // Run as a user pastes it: sh, after the export line; -f json to read the answer.
      const sh = async <T>(line: string): Promise<T> => {
        const r = await run('sh', ['-c', `${printed[0]}\n${line} -f json`], { timeout: 90_000 }).catch(
          (e: { stdout: string; stderr: string }) => {
            throw new Error(`${line}: ${e.stderr}`);
          },
        );
        return JSON.parse(r.stdout) as T;
      };

      // Berth's providers reach the lab Placement: each host's root, and under it a provider per
      // device (6 on a demo host: its VFs are counted on their PF, as Nova does).
      type Rp = { uuid: string; name: string; parent_provider_uuid: string | null };
      const providers = await eventually(
        () => sh<Rp[]>(command(/resource provider list$/)),
        (list) => list.filter((p) => p.parent_provider_uuid !== null).length === 12,
        120_000,
      );
      expect(providers.map((p) => p.name)).toEqual(expect.arrayContaining(['sim-host-1', 'sim-host-2']));
      const rc = /"resources:(CUSTOM_[A-Z0-9_]+)"/.exec(command(/device profile create/))![1]!;
      const profile = await sh<{ name: string }>(command(/device profile create/));
      expect(profile.name).toBe('lab');
      const arq = await sh<{ uuid: string; state: string }>(command(/arq create lab$/));
      expect(arq.state).toBe('Initial');
      const listed = await sh<Array<{ uuid: string }>>(command(/arq list$/));
      expect(listed.map((a) => a.uuid)).toContain(arq.uuid);
      // The bind line with the ARQ and a provider of sim-host-1 that has the profile's class.
      const hostRoot = providers.find((p) => p.name === 'sim-host-1')!;
      let provider: string | undefined;
      for (const p of providers.filter((x) => x.parent_provider_uuid === hostRoot.uuid)) {
        const inv = await sh<Array<{ resource_class: string }>>(
          command(/resource provider list$/).replace(
            'resource provider list',
            `resource provider inventory list ${p.uuid}`,
          ),
        );
        if (inv.some((i) => i.resource_class === rc)) {
          provider = p.uuid;
          break;
        }
      }
      expect(provider, `no provider of sim-host-1 with ${rc}`).toBeDefined();
      const bind = command(/arq bind ARQ_UUID/)
        .replace(/\s+#.*$/, '')
        .replace('ARQ_UUID', arq.uuid)
        .replace('PROVIDER_UUID', provider!);
      await sh(`${bind} admin`);
      await eventually(
        () => sh<Array<{ uuid: string; state: string }>>(command(/arq list$/)),
        (list) => list.some((a) => a.uuid === arq.uuid && a.state === 'Bound'),
        90_000,
      );
      const shown = await sh<{ device_rp_uuid: string; hostname: string; attach_handle_type: string }>(
        command(/arq list$/).replace('arq list', `arq show ${arq.uuid}`),
      );
      expect(shown).toMatchObject({
        device_rp_uuid: provider,
        hostname: 'sim-host-1',
        attach_handle_type: 'PCI',
      });
      // No Nova: one log line says no event is sent.
      const log = await readFile(join(stateDir, 'berth-up.log'), 'utf8');
      const said = log.split('\n').filter((l) => l.includes('no accelerator-request-bound event is sent'));
      expect(said).toHaveLength(1);
      expect(said[0]).toContain('no --nova-url');

      up.child.kill('SIGTERM');
      expect(await up.exited).toEqual({ code: 0, signal: null });
      // placement-api stopped with it: nothing answers at its address.
      const placementUrl = /^ {2}placement {2}(http:\/\/127\.0\.0\.1:\d+)/m.exec(out)![1]!;
      const after = await fetch(placementUrl).then(
        () => 'answered',
        () => 'gone',
      );
      expect(after).toBe('gone');
    },
    420_000,
  );

  it('without placement-api on $PATH: exit 2, what to install, nothing started', async () => {
    // Every command of /usr/bin and /bin but placement-api and placement-manage.
    const path = join(dir.path, 'path-without-placement');
    await mkdir(path);
    for (const from of ['/usr/bin', '/bin', '/usr/local/bin']) {
      if (!existsSync(from)) continue;
      for (const name of await readdir(from)) {
        if (name.startsWith('placement-') || existsSync(join(path, name))) continue;
        await symlink(join(from, name), join(path, name));
      }
    }
    const stateDir = join(dir.path, 'absent-state');
    const port = await freePort();
    const r = await berth(
      ['up', '--openstack', '--listen', `127.0.0.1:${port}`, '--state-dir', stateDir],
      cliEnv(join(dir.path, 'absent.yaml'), { PATH: path }),
      120_000,
    );
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim()).toBe(
      "berth: usage: --openstack runs OpenStack Placement, and placement-api and placement-manage are not on $PATH: install Debian's placement-api (sudo apt-get install placement-api python3-osc-placement python3-openstackclient python3-cyborgclient), then run berth up --openstack again",
    );
    expect(r.stdout).not.toContain('Berth is up');
    expect(existsSync(join(stateDir, 'tokens.yaml'))).toBe(false);
  }, 150_000);
});
