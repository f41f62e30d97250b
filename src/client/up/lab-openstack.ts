/**
 * `berth up --openstack`: the OpenStack side of a lab on this machine.
 * Debian's placement-api (found on $PATH, never installed by Berth) on a
 * SQLite file in the state directory with noauth2, as the test harness runs
 * it (../shared/notes/openstack.md): `placement-manage db sync`, then
 * `placement-api` on a free loopback port. Berth reports its providers there
 * and serves the Cyborg API (noauth) beside it; the `openstack` commands that
 * reach both are printed (docs/cyborg.md "Try it").
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { constants, createWriteStream } from 'node:fs';
import { access, mkdir, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { UsageError } from '../usage-error.js';

const run = promisify(execFile);

/** What a newcomer installs for the lab (Debian 12; PyPI is not needed). */
const LAB_PACKAGES = 'placement-api python3-osc-placement python3-openstackclient python3-cyborgclient';

/** `name`'s full path when it is an executable file in a directory of $PATH, else null. */
export async function which(name: string): Promise<string | null> {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    try {
      await access(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return null;
}

/** placement-api and placement-manage from $PATH; a UsageError saying what to install when absent. */
export async function findPlacement(): Promise<{ api: string; manage: string }> {
  const api = await which('placement-api');
  const manage = await which('placement-manage');
  if (api && manage) return { api, manage };
  const missing = [api ? null : 'placement-api', manage ? null : 'placement-manage'].filter(Boolean);
  throw new UsageError(
    `--openstack runs OpenStack Placement, and ${missing.join(' and ')} ${missing.length > 1 ? 'are' : 'is'} not on $PATH: install Debian's placement-api (sudo apt-get install ${LAB_PACKAGES}), then run berth up --openstack again`,
  );
}

export interface LabPlacement {
  /** http://127.0.0.1:PORT */
  url: string;
  /** placement-api's own output. */
  logFile: string;
  stop(): Promise<void>;
}

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const addr = s.address();
      s.close(() => resolve(typeof addr === 'object' && addr ? addr.port : 0));
    });
  });

/**
 * Placement on `dir`/placement.sqlite (kept across restarts: Berth's providers
 * are reconciled, not recreated), answering on a free loopback port within
 * `timeoutMs`; else an Error quoting the end of its log.
 */
export async function startLabPlacement(
  bins: { api: string; manage: string },
  dir: string,
  timeoutMs = 60_000,
): Promise<LabPlacement> {
  await mkdir(dir, { recursive: true });
  const conf = join(dir, 'placement.conf');
  await writeFile(
    conf,
    [
      '# Written by berth up --openstack at every start: a lab Placement (noauth2: X-Auth-Token is the user).',
      '[DEFAULT]',
      'use_stderr = true',
      '[api]',
      'auth_strategy = noauth2',
      '[placement_database]',
      `connection = sqlite:///${join(dir, 'placement.sqlite')}`,
      '',
    ].join('\n'),
  );
  const env = { ...process.env, OS_PLACEMENT_CONFIG_DIR: dir };
  try {
    await run(bins.manage, ['--config-file', conf, 'db', 'sync'], { env, timeout: timeoutMs });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`placement-manage db sync failed: ${(e.stderr || e.message).trim().slice(-2000)}`);
  }
  const logFile = join(dir, 'placement-api.log');
  const log = createWriteStream(logFile, { flags: 'a' });
  let tail = '';
  // A port taken between the probe and placement-api's bind makes it exit: another port.
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child: ChildProcess = spawn(bins.api, ['--port', String(port), '--host', '127.0.0.1'], {
      env,
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (b: Buffer) => {
      log.write(b);
      tail = (tail + b.toString()).slice(-4000);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    const killOnExit = () => child.kill('SIGKILL');
    process.once('exit', killOnExit);
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    const url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + timeoutMs;
    let up = false;
    while (!up && child.exitCode === null && child.signalCode === null && Date.now() < deadline) {
      await Promise.race([exited, new Promise((r) => setTimeout(r, 200))]);
      up = await fetch(url, { signal: AbortSignal.timeout(2_000) }).then(
        (r) => r.ok,
        () => false,
      );
    }
    if (up) {
      return {
        url,
        logFile,
        async stop() {
          process.removeListener('exit', killOnExit);
          if (child.exitCode === null && child.signalCode === null) {
            const force = setTimeout(() => child.kill('SIGKILL'), 5_000);
            child.kill('SIGTERM');
            await exited;
            clearTimeout(force);
          }
          log.end();
        },
      };
    }
    child.kill('SIGKILL');
    await exited;
    process.removeListener('exit', killOnExit);
    if (Date.now() >= deadline) break;
  }
  log.end();
  throw new Error(
    `placement-api did not answer within ${timeoutMs / 1000} s (its log: ${logFile}):\n${tail}`,
  );
}
