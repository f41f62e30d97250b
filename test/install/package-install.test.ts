/**
 * Berth as an operator installs it: `npm pack` of this checkout, `npm install -g`
 * of the tarball into a temporary prefix, then the installed `berth` — not the
 * checkout's — run as an unprivileged user (nobody, when the test runs as root):
 * `--version`, `sim build` + `agent discover`, `berth up` + `berth demo`. A
 * vendor driver published as its own package (test/fixtures/vendor-driver-package)
 * is installed beside it, loaded by package name from `enabled_drivers`, and
 * scrubs a device through the installed agent's CleanupDevice stream.
 *
 * The install is real (npm resolves, extracts and runs every install script),
 * offline where it can be: packages come from the npm cache `npm install` filled
 * (the registry only for what is missing), and better-sqlite3's install script
 * (prebuild-install) fetches its prebuilt binary from a mirror on 127.0.0.1 —
 * prebuild-install's documented `npm_config_<package>_binary_host` option for
 * hosts without internet — serving the module this checkout compiled from the
 * same pinned version, instead of compiling it a second time (~1 min on 2 cores).
 */
import { type ChildProcess, execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { chmod, chown, cp, mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { AgentClient } from '../../src/client/sdk.js';
import { CleanupPhase } from '../../src/gen/berth/agent/v1/agent.js';
import { tempDir } from '../helpers/agent.js';
import { type Running, start } from '../helpers/berth-cli.js';
import { holdsTenantData, isAllZero, writeTenantData } from '../helpers/nvme-host.js';
import { available, systemdAnalyze } from '../helpers/prerequisites.js';
import { freePort } from '../helpers/processes.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const PKG = JSON.parse(await readFile(join(REPO, 'package.json'), 'utf8')) as { version: string };
const SQLITE_DIR = join(REPO, 'node_modules/better-sqlite3');
const SQLITE_VERSION = (
  JSON.parse(await readFile(join(SQLITE_DIR, 'package.json'), 'utf8')) as { version: string }
).version;
const NVME0 = '0000:3d:00.0';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function run(
  file: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number },
) {
  return new Promise<Run>((resolve) => {
    execFile(
      file,
      args,
      { cwd: opts.cwd, env: opts.env, timeout: opts.timeoutMs ?? 120_000, maxBuffer: 32 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

const ok = (r: Run, what: string): Run => {
  if (r.code !== 0) throw new Error(`${what} exited ${r.code}\n${r.stdout}\n${r.stderr}`);
  return r;
};

/** Every file under `dir` with its size and mtime: the installed package must not change at run time. */
function snapshot(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else {
        const s = statSync(p);
        out.set(p, `${s.size}:${s.mtimeMs}`);
      }
    }
  };
  walk(dir);
  return out;
}

describe('the packed tarball, installed globally', () => {
  const asRoot = process.getuid?.() === 0;
  let dir: Awaited<ReturnType<typeof tempDir>>;
  let mirror: Server;
  const mirrorRequests: string[] = [];
  let prefix: string;
  let berthBin: string;
  let installed: string;
  let home: string;
  const children: ChildProcess[] = [];

  /** Runs the installed berth as the unprivileged user (nobody when this test runs as root). */
  const userEnv = () => ({
    // The system's PATH, not the one npm and vitest give this test (with the checkout's node_modules/.bin).
    PATH: (process.env.PATH ?? '/usr/bin:/bin')
      .split(':')
      .filter((d) => !d.includes('node_modules'))
      .join(':'),
    HOME: home,
    BERTH_CONFIG: join(home, 'berth-client.yaml'),
    LANG: 'C.UTF-8',
  });
  // setpriv execs (no parent stays behind, unlike runuser): the pid is berth's and so is the exit code.
  const asUser = (args: string[]): [string, string[]] =>
    asRoot
      ? [
          'setpriv',
          [
            '--reuid=65534',
            '--regid=65534',
            '--clear-groups',
            '--',
            'env',
            '-i',
            ...envArgs(),
            berthBin,
            ...args,
          ],
        ]
      : [berthBin, args];
  const envArgs = () => Object.entries(userEnv()).map(([k, v]) => `${k}=${v}`);
  const berthAsUser = (args: string[], timeoutMs = 120_000) => {
    const [file, argv] = asUser(args);
    return run(file, argv, { env: asRoot ? process.env : { ...process.env, ...userEnv() }, timeoutMs });
  };

  beforeAll(async () => {
    dir = await tempDir('berth-install-');
    // mkdtemp makes 0700; the unprivileged user must reach the prefix and its home.
    await chmod(dir.path, 0o755);
    prefix = join(dir.path, 'prefix');
    home = join(dir.path, 'home');
    await mkdir(home);
    if (asRoot) await chown(home, 65534, 65534);

    // The package: dist/ as the checkout builds it (scripts/build.sh is what prepack runs).
    ok(await run(join(REPO, 'scripts/build.sh'), ['--if-stale'], { cwd: REPO }), 'build');
    const packed = ok(
      await run('npm', ['pack', '--ignore-scripts', '--pack-destination', dir.path], { cwd: REPO }),
      'npm pack',
    );
    const berthTgz = join(dir.path, packed.stdout.trim().split('\n').at(-1)!);
    // The vendor's package, packed from its own directory as a vendor would.
    const vendorSrc = join(dir.path, 'acme-src');
    await cp(join(REPO, 'test/fixtures/vendor-driver-package'), vendorSrc, { recursive: true });
    const vpacked = ok(
      await run('npm', ['pack', '--pack-destination', dir.path], { cwd: vendorSrc }),
      'pack',
    );
    const vendorTgz = join(dir.path, vpacked.stdout.trim().split('\n').at(-1)!);

    // The prebuilt-binary mirror better-sqlite3's install script asks.
    const prebuilt = join(dir.path, 'prebuilt.tar.gz');
    ok(
      await run('tar', ['-czf', prebuilt, '-C', SQLITE_DIR, 'build/Release/better_sqlite3.node'], {}),
      'tar',
    );
    const body = await readFile(prebuilt);
    mirror = createServer((req, res) => {
      mirrorRequests.push(req.url ?? '');
      if (
        req.url?.endsWith(
          `better-sqlite3-v${SQLITE_VERSION}-node-v${process.versions.modules}-linux-x64.tar.gz`,
        )
      ) {
        res.writeHead(200, { 'content-type': 'application/gzip', 'content-length': body.length });
        res.end(body);
      } else {
        res.writeHead(404).end();
      }
    });
    await new Promise<void>((r) => mirror.listen(0, '127.0.0.1', r));
    const port = (mirror.address() as AddressInfo).port;

    // npm's cache, shared (read: the tarballs npm install fetched), with a _prebuilds of our own.
    const cache = join(dir.path, 'npm-cache');
    await mkdir(cache);
    const realCache = (await run('npm', ['config', 'get', 'cache'], {})).stdout.trim();
    if (realCache && existsSync(join(realCache, '_cacache'))) {
      await symlink(join(realCache, '_cacache'), join(cache, '_cacache'));
    }
    const install = await run(
      'npm',
      [
        'install',
        '--global',
        '--prefix',
        prefix,
        '--cache',
        cache,
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
        berthTgz,
        vendorTgz,
      ],
      {
        cwd: dir.path,
        env: { ...process.env, npm_config_better_sqlite3_binary_host: `http://127.0.0.1:${port}` },
        timeoutMs: 600_000,
      },
    );
    ok(install, 'npm install -g');
    berthBin = join(prefix, 'bin', 'berth');
    installed = join(prefix, 'lib', 'node_modules', 'berth');
  }, 660_000);

  afterAll(async () => {
    for (const c of children) {
      if (c.pid && c.exitCode === null && c.signalCode === null) {
        try {
          process.kill(-c.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
    await new Promise<void>((r) => (mirror ? mirror.close(() => r()) : r()));
    await dir?.cleanup();
  }, 30_000);

  /** A long-running installed berth, in its own process group (afterAll ends it and its children). */
  function startBerth(file: string, args: string[], env: NodeJS.ProcessEnv): Running {
    const r = start(args, env, { bin: file, detached: true });
    children.push(r.child);
    return r;
  }

  it('installs only what runs, and the native module came from the mirror, not a compile', () => {
    expect(readdirSync(installed).sort()).toEqual([
      'LICENSE',
      'README.md',
      'deploy',
      'dist',
      'node_modules',
      'package.json',
      'schema',
    ]);
    expect(existsSync(join(installed, 'dist/gen/berth.binpb'))).toBe(true);
    // The license package.json names, in the package.
    expect(readFileSync(join(installed, 'LICENSE'), 'utf8')).toMatch(
      /^\s*Apache License\s+Version 2\.0, January 2004/,
    );
    expect(JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')).license).toBe('Apache-2.0');
    expect(existsSync(join(installed, 'dist/client/cli/main.js'))).toBe(true);
    expect(existsSync(join(installed, 'schema/agent-config.schema.json'))).toBe(true);
    for (const dev of ['typescript', 'tsx', 'esbuild', 'vitest', '@biomejs', 'fast-check', 'ts-proto']) {
      expect(existsSync(join(installed, 'node_modules', dev)), dev).toBe(false);
    }
    expect(mirrorRequests).toHaveLength(1);
    expect(existsSync(join(installed, 'node_modules/better-sqlite3/build/Release/better_sqlite3.node'))).toBe(
      true,
    );
  });

  it('a TypeScript project type-checks against berth/sdk, berth/api/* and berth/driver, and runs', async () => {
    // A project with Berth as a dependency (a link to the installed package, as npm would lay it out).
    const project = join(dir.path, 'orchestrator');
    await mkdir(join(project, 'node_modules'), { recursive: true });
    await symlink(installed, join(project, 'node_modules', 'berth'));
    await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'orchestrator', type: 'module' }));
    await writeFile(
      join(project, 'main.ts'),
      [
        "import { BerthClientError, SchedulerClient } from 'berth/sdk';",
        "import { DeviceState } from 'berth/api/scheduler/v1/device';",
        "import { GenericDriver, type HostContext } from 'berth/driver';",
        'const client: SchedulerClient = new SchedulerClient({ endpoint: "127.0.0.1:1", retries: 1 });',
        'const state: DeviceState = DeviceState.DEVICE_STATE_AVAILABLE;',
        'const ctx: Pick<HostContext, "sysfsRoot"> = { sysfsRoot: "/sys" };',
        'console.log(typeof client.devices.listDevices, state, typeof GenericDriver, ctx.sysfsRoot, BerthClientError.name);',
        'client.close();',
      ].join('\n'),
    );
    await writeFile(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          outDir: 'out',
          skipLibCheck: false,
          types: ['node'],
          typeRoots: [join(REPO, 'node_modules/@types')],
        },
        files: ['main.ts'],
      }),
    );
    const tsc = await run(join(REPO, 'node_modules/.bin/tsc'), ['-p', project], { cwd: project });
    expect(tsc.code, `${tsc.stdout}\n${tsc.stderr}`).toBe(0);
    // What tsc emitted runs against the installed package.
    const ran = await run(process.execPath, [join(project, 'out', 'main.js')], { cwd: project });
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout.trim()).toBe('function 1 function /sys BerthClientError');
  }, 60_000);

  it(`runs as ${asRoot ? 'nobody' : 'this unprivileged user'}: --version, sim build, agent discover`, async () => {
    const before = snapshot(installed);
    const version = await berthAsUser(['--version']);
    expect(version.code, version.stderr).toBe(0);
    expect(version.stdout.trim()).toBe(PKG.version);

    const simRoot = join(home, 'host');
    const built = await berthAsUser(['sim', 'build', '--root', simRoot, '--host', 'install-host']);
    expect(built.code, built.stderr).toBe(0);
    const { config } = JSON.parse(built.stdout) as { config: string };
    const discover = await berthAsUser(['agent', 'discover', '-c', config, '-o', 'json']);
    expect(discover.code, discover.stderr).toBe(0);
    const found = JSON.parse(discover.stdout) as { devices: { address: string; driver: string }[] };
    expect(found.devices).toHaveLength(9);
    expect(found.devices.filter((d) => d.driver === 'nvme')).toHaveLength(4);
    // Nothing was written into the installed package (a root-owned install serves every user).
    expect(snapshot(installed)).toEqual(before);
  }, 120_000);

  it('berth up, then berth demo against it, as the unprivileged user; SIGTERM stops it with 0', async () => {
    const before = snapshot(installed);
    const port = await freePort();
    const [file, argv] = asUser(['up', '--listen', `127.0.0.1:${port}`, '--state-dir', join(home, 'up')]);
    const up = startBerth(file, argv, asRoot ? process.env : { ...process.env, ...userEnv() });
    await up.waitFor(/Berth is up/, 120_000);
    // The quick start's hint names the installed command, not the checkout's bin/berth, and
    // suggests no tool the package does not install (buf is a development dependency).
    expect(up.stdout()).toMatch(/^ {2}berth demo/m);
    expect(up.stdout()).not.toMatch(/buf curl|grpcurl/);
    // What the systemd units gate their start on.
    const health = await berthAsUser(['health', '--endpoint', `127.0.0.1:${port}`]);
    expect(health.code, health.stderr).toBe(0);
    expect(health.stdout.trim()).toBe(`127.0.0.1:${port}: SERVING`);
    const demo = await berthAsUser(['demo'], 240_000);
    expect(demo.code, `${demo.stdout}\n${demo.stderr}`).toBe(0);
    expect(demo.stdout).toContain(`Using the Berth scheduler at 127.0.0.1:${port}.`);
    expect(demo.stdout).toMatch(/All 9 steps did what they should/);
    up.child.kill('SIGTERM');
    expect(await up.exited).toEqual({ code: 0, signal: null });
    expect(snapshot(installed)).toEqual(before);
  }, 400_000);

  it('loads a vendor driver installed as its own package by name, and scrubs a device with it', async () => {
    const simRoot = join(dir.path, 'vendor-host');
    const built = ok(
      await run(berthBin, ['sim', 'build', '--root', simRoot, '--host', 'vendor-host'], {}),
      'sim build',
    );
    const { config } = JSON.parse(built.stdout) as { config: string };
    const doc = parseYaml(await readFile(config, 'utf8')) as Record<string, Record<string, unknown>>;
    const nvme = doc.nvme!;
    // nvme0 moves from the generic driver to the vendor's package; the section is keyed by its last segment.
    doc.enabled_drivers = ['pci', 'nvme', '@acme/berth-driver-x'] as unknown as Record<string, unknown>;
    doc.nvme = {
      ...nvme,
      device_spec: [
        { vendor_id: '144d', address: '*:3e:00.0' },
        { address: '*:3f:00.0' },
        { address: '*:40:00.0' },
      ],
    };
    doc['berth-driver-x'] = {
      nvme_cli: nvme.nvme_cli,
      poll_interval: 0.2,
      device_spec: [{ address: NVME0 }],
    };
    await writeFile(config, toYaml(doc));

    const agent = startBerth(
      berthBin,
      ['agent', 'serve', '-c', config, '--listen', '127.0.0.1:0'],
      process.env,
    );
    await agent.waitFor(/"endpoint":"[^"]+"/, 60_000);
    const endpoint = /"endpoint":"([^"]+)"/.exec(agent.stdout())![1];
    const client = new AgentClient({ endpoint: endpoint! });
    try {
      const info = await client.agent.getAgentInfo({});
      const acme = info.drivers.find((d) => d.name === 'acme-x');
      expect(acme?.source).toBe(`file://${join(prefix, 'lib/node_modules/@acme/berth-driver-x/index.js')}`);
      const ns = join(simRoot, 'dev', 'nvme0n1');
      await writeTenantData(ns, 8 * 1024 * 1024);
      expect(await holdsTenantData(ns)).toBe(true);
      const events = [];
      for await (const m of client.cleanupDevice({ address: NVME0, jobId: 'acme-1' })) events.push(m.event!);
      expect(events.at(-1)!.phase, JSON.stringify(events.at(-1))).toBe(CleanupPhase.CLEANUP_PHASE_SUCCEEDED);
      expect(events.every((e) => e.action === 'acme-format-ses1')).toBe(true);
      expect(events.some((e) => e.message.startsWith('acme: format nsid'))).toBe(true);
      expect(await holdsTenantData(ns)).toBe(false);
      expect(await isAllZero(ns)).toBe(true);
    } finally {
      client.close();
      process.kill(-agent.child.pid!, 'SIGTERM');
      await agent.exited;
    }
  }, 180_000);

  it.skipIf(!available(systemdAnalyze(), 'the systemd unit check'))(
    'systemd units: systemd-analyze verify passes on both, pointed at the installed berth',
    async () => {
      const unitDir = join(dir.path, 'units');
      await mkdir(unitDir);
      const names = readdirSync(join(installed, 'deploy/systemd'))
        .filter((n) => n.endsWith('.service'))
        .sort();
      expect(names).toEqual(['berth-agent.service', 'berth-scheduler.service']);
      // The scheduler's TLS drop-in ships beside it, and is checked with it.
      await mkdir(join(unitDir, 'berth-scheduler.service.d'));
      await cp(
        join(installed, 'deploy/systemd/berth-scheduler.service.d/tls.conf'),
        join(unitDir, 'berth-scheduler.service.d/tls.conf'),
      );
      for (const name of names) {
        const text = await readFile(join(installed, 'deploy/systemd', name), 'utf8');
        // The one change: where berth is installed (the units say /usr/local/bin, Debian's npm prefix).
        expect(text).toContain('ExecStart=/usr/local/bin/berth ');
        await writeFile(join(unitDir, name), text.replaceAll('/usr/local/bin/berth', berthBin));
      }
      const verify = await run('systemd-analyze', ['verify', ...names.map((n) => join(unitDir, n))], {});
      expect(verify.code, `${verify.stdout}\n${verify.stderr}`).toBe(0);
      expect(verify.stderr.trim()).toBe('');
    },
  );
});
