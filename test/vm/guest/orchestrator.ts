/**
 * Runs inside the QEMU guest (bundled by the host into the initramfs; node
 * built-ins only): describes the controllers with nvme-cli, runs Berth's dry
 * run, starts the real agent from the checkout and calls its CleanupDevice
 * through `buf curl`, lets nvme-cli probe the controllers afterwards, and
 * writes every outcome as a JSON line to the second serial port. It judges
 * nothing: the host does, from these lines and from the backing files.
 *
 * Every wait is bounded by plan.stepTimeoutMs; the host bounds the whole guest.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, writeSync } from 'node:fs';
import { release } from 'node:os';
import { join } from 'node:path';
import type {
  CleanupRecord,
  CommandRecord,
  GuestPlan,
  GuestRecord,
  InventoryRecord,
  RpcRecord,
  RunResult,
} from '../protocol.js';
import { JsonValueStream, splitJsonValues } from './json-values.js';

const plan = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as GuestPlan;
const results = openSync(plan.resultsDevice, 'w');

function emit(record: GuestRecord): void {
  writeSync(results, `${JSON.stringify(record)}\n`);
}

function uptime(): number {
  return Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
}

/** Runs argv to completion (no shell), killing it at the step bound. */
function run(argv: string[]): Promise<RunResult> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, plan.stepTimeoutMs);
    child.on('error', (err) => {
      stderr += `cannot run ${argv[0]}: ${err.message}\n`;
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ exitCode: code, signal, timedOut, stdout, stderr, ms: Date.now() - started });
    });
  });
}

async function command(name: string, argv: string[]): Promise<CommandRecord> {
  const record: CommandRecord = { type: 'command', name, argv, ...(await run(argv)) };
  emit(record);
  return record;
}

const PCI_ADDRESS = /^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/;

/** The kernel's controller for a PCI function, straight from sysfs (nvmeN). */
function controllerOf(address: string): string {
  if (!PCI_ADDRESS.test(address)) throw new Error(`not a PCI address: ${address}`);
  const names = readdirSync(`/sys/bus/pci/devices/${address}/nvme`).filter((n) => /^nvme\d+$/.test(n));
  if (names.length !== 1) throw new Error(`${address}: expected one NVMe controller, found [${names}]`);
  return names[0]!;
}

/** The first private namespace (nvmeXnY under the controller) as a /dev path. */
function firstNamespaceOf(address: string): string {
  const ctrl = controllerOf(address);
  const ns = readdirSync(`/sys/bus/pci/devices/${address}/nvme/${ctrl}`)
    .filter((n) => /^nvme\d+n\d+$/.test(n))
    .sort();
  if (ns.length === 0) throw new Error(`${address}: ${ctrl} has no private namespace to probe`);
  return `/dev/${ns[0]}`;
}

interface ServingAgent {
  child: ChildProcess;
  stderr: string[];
  endpoint: Promise<string>;
}

/** `bin/berth agent serve`; resolves the endpoint from its `listening` line. */
function startAgent(): ServingAgent {
  const child = spawn(join(plan.repo, 'bin/berth'), ['agent', 'serve', '--config', plan.agentConfig], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const stderr: string[] = [];
  let partial = '';
  child.stderr!.on('data', (c: Buffer) => {
    const lines = (partial + c.toString()).split('\n');
    partial = lines.pop()!;
    stderr.push(...lines);
  });
  const endpoint = new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(
      () => reject(new Error(`the agent did not listen within ${plan.stepTimeoutMs} ms`)),
      plan.stepTimeoutMs,
    );
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      // Complete lines only: a chunk may end in the middle of one.
      for (const line of out.split('\n').slice(0, -1)) {
        if (!line.includes('"listening"')) continue;
        clearTimeout(timer);
        try {
          resolve((JSON.parse(line) as { endpoint: string }).endpoint);
        } catch {
          reject(new Error(`the agent printed an unreadable listening line: ${line}`));
        }
      }
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the agent exited (${code ?? signal}) before listening`));
    });
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
  endpoint.catch(() => {});
  return { child, stderr, endpoint };
}

async function stopAgent(agent: ServingAgent): Promise<void> {
  if (agent.child.exitCode !== null || agent.child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => agent.child.once('exit', () => resolve()));
  agent.child.kill('SIGTERM');
  const timer = setTimeout(() => agent.child.kill('SIGKILL'), plan.stepTimeoutMs);
  await exited;
  clearTimeout(timer);
}

/** One unary call of the agent through buf curl; the response parsed, or the error as buf curl printed it. */
async function rpc(endpoint: string, method: string, request: unknown): Promise<RpcRecord> {
  const r = await run([
    plan.buf,
    'curl',
    '--protocol',
    'grpc',
    '--http2-prior-knowledge',
    '-H',
    `authorization: Bearer ${plan.token}`,
    '-d',
    JSON.stringify(request),
    `http://${endpoint}/berth.agent.v1.AgentService/${method}`,
  ]);
  let response: unknown = null;
  let stderr = r.stderr;
  if (r.exitCode === 0) {
    try {
      response = JSON.parse(r.stdout);
    } catch (e) {
      stderr += `\nunparsable buf curl output (${(e as Error).message}): ${r.stdout}`;
    }
  }
  const record: RpcRecord = { type: 'rpc', method, request, exitCode: r.exitCode, response, stderr };
  emit(record);
  return record;
}

/** The agent's state dir (its journal, the identities it keeps). */
const stateDir = () => join(plan.workDir, 'agent-state');

/** The public half of the agent's certificate signing key, as a JWK, in a `signing-key` command record. */
function emitPublicKey(): void {
  const started = Date.now();
  let stdout = '';
  let stderr = '';
  try {
    const key = createPublicKey(createPrivateKey(readFileSync(join(stateDir(), 'signing-key.pem'))));
    stdout = JSON.stringify(key.export({ format: 'jwk' }));
  } catch (e) {
    stderr = (e as Error).message;
  }
  emit({
    type: 'command',
    name: 'signing-key',
    argv: ['read', join(stateDir(), 'signing-key.pem')],
    exitCode: stderr ? 1 : 0,
    signal: null,
    timedOut: false,
    stdout,
    stderr,
    ms: Date.now() - started,
  });
}

async function cleanup(endpoint: string, address: string, jobId: string): Promise<CleanupRecord> {
  const r = await run([
    plan.buf,
    'curl',
    '--protocol',
    'grpc',
    '--http2-prior-knowledge',
    '-H',
    `authorization: Bearer ${plan.token}`,
    '-d',
    JSON.stringify({ address, jobId }),
    `http://${endpoint}/berth.agent.v1.AgentService/CleanupDevice`,
  ]);
  let responses: unknown[];
  let stderr = r.stderr;
  try {
    responses = splitJsonValues(r.stdout);
  } catch (e) {
    responses = [];
    stderr += `\nunparsable buf curl output (${(e as Error).message}): ${r.stdout}`;
  }
  const record: CleanupRecord = {
    type: 'cleanup',
    address,
    jobId,
    exitCode: r.exitCode,
    timedOut: r.timedOut,
    responses,
    stderr,
    ms: r.ms,
  };
  emit(record);
  return record;
}

/**
 * Follows the agent's WatchInventory through buf curl while the host plugs a
 * controller at `address` and pulls it: `hotplug-ready` once the snapshot is
 * in (the host waits for it before it plugs), then one record per event about
 * the address, until it is removed or the time is up.
 */
function followHotplug(endpoint: string, h: { address: string; timeoutMs: number }): Promise<void> {
  return new Promise((resolve) => {
    const child = spawn(
      plan.buf,
      [
        'curl',
        '--protocol',
        'grpc',
        '--http2-prior-knowledge',
        '-H',
        `authorization: Bearer ${plan.token}`,
        '-d',
        '{}',
        `http://${endpoint}/berth.agent.v1.AgentService/WatchInventory`,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const values = new JsonValueStream();
    let stderr = '';
    let ready = false;
    let done = false;
    const end = (removed: boolean, error?: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      child.kill('SIGKILL');
      emit({ type: 'hotplug-end', removed, ...(error ? { error } : {}) });
      resolve();
    };
    const timer = setTimeout(
      () =>
        end(false, `no removal of ${h.address} within ${h.timeoutMs} ms; buf curl said: ${stderr.trim()}`),
      h.timeoutMs,
    );
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      let got: unknown[];
      try {
        got = values.push(chunk);
      } catch (e) {
        end(false, `unreadable WatchInventory output: ${(e as Error).message}`);
        return;
      }
      for (const v of got as Record<string, Record<string, unknown> | undefined>[]) {
        if (v.snapshot && !ready) {
          ready = true;
          emit({ type: 'hotplug-ready', uptime: uptime() });
          continue;
        }
        const kind = (['added', 'changed', 'removed'] as const).find((k) => v[k] !== undefined);
        if (!kind || v[kind]!.address !== h.address) continue;
        const record: InventoryRecord = {
          type: 'inventory',
          kind,
          address: h.address,
          ...(kind === 'removed' ? {} : { device: v[kind] }),
          uptime: uptime(),
        };
        emit(record);
        if (kind === 'removed') end(true);
      }
    });
    child.stderr!.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    child.on('close', () => end(false, `buf curl ended: ${stderr.trim()}`));
  });
}

/**
 * A write from the guest, outside Berth, to media Berth recorded clean; the
 * controller's own counters before and after (nvme-cli), what the agent makes
 * of it after a rediscovery, and its next cleanup.
 */
async function writeAfterClean(endpoint: string, w: { address: string; jobId: string }): Promise<void> {
  const ctrl = `/dev/${controllerOf(w.address)}`;
  const ns = firstNamespaceOf(w.address);
  const smartLog = (when: string) =>
    command(`smart-log ${when} ${w.address}`, [plan.nvmeCli, 'smart-log', ctrl, '-o', 'json']);
  await smartLog('before');
  await command(`outside write ${w.address}`, [
    '/bin/sh',
    '-c',
    `yes OUTSIDE-BERTH | head -c 65536 | dd of=${ns} bs=65536 count=1 iflag=fullblock oflag=direct conv=notrunc status=none`,
  ]);
  await smartLog('after');
  await rpc(endpoint, 'Rediscover', {});
  await rpc(endpoint, 'ListDevices', {});
  await cleanup(endpoint, w.address, w.jobId);
  await rpc(endpoint, 'ListDevices', {});
}

async function main(): Promise<void> {
  emit({ type: 'start', uptime: uptime(), kernel: release(), netdevs: readdirSync('/sys/class/net').sort() });
  mkdirSync(join(plan.workDir, 'dry-run'), { recursive: true });

  // The controllers as nvme-cli itself sees them, before Berth touches anything.
  if (plan.controllers.length > 0) await command('nvme-list', [plan.nvmeCli, 'list', '-v', '-o', 'json']);
  for (const address of plan.controllers) {
    await command(`id-ctrl ${address}`, [
      plan.nvmeCli,
      'id-ctrl',
      `/dev/${controllerOf(address)}`,
      '-o',
      'json',
    ]);
    // The kernel's name for the media (the subsystem NQN): equal on every controller of one subsystem.
    await command(`subsysnqn ${address}`, [
      'cat',
      `/sys/bus/pci/devices/${address}/nvme/${controllerOf(address)}/subsysnqn`,
    ]);
  }
  for (const { address, nsid } of plan.idNs ?? []) {
    await command(`id-ns ${address} ${nsid}`, [
      plan.nvmeCli,
      'id-ns',
      `/dev/${controllerOf(address)}`,
      '-n',
      String(nsid),
      '-o',
      'json',
    ]);
  }

  // The journal of this host's previous boot.
  if (plan.restoreState && existsSync(plan.restoreState)) {
    mkdirSync(stateDir(), { recursive: true });
    cpSync(plan.restoreState, stateDir(), { recursive: true });
    emit({ type: 'state', restored: readdirSync(stateDir()).sort() });
  }

  // The agent starts while the dry run runs: two node processes, two vCPUs.
  const agent = startAgent();
  try {
    const berth = join(plan.repo, 'bin/berth');
    if (plan.dryRun !== false) {
      await command('dry-run', [
        berth,
        'agent',
        'discover',
        '--config',
        plan.agentConfig,
        '--state-dir',
        join(plan.workDir, 'dry-run'),
        '-o',
        'json',
      ]);
    }
    let endpoint: string;
    try {
      endpoint = await agent.endpoint;
      emit({ type: 'agent', listening: endpoint });
    } catch (e) {
      emit({ type: 'agent', listening: null, error: (e as Error).message });
      return;
    }
    for (const b of plan.bindings ?? []) await rpc(endpoint, 'RecordBinding', b);
    await Promise.all(plan.cleanups.map((c) => cleanup(endpoint, c.address, c.jobId)));
    // The agent's public key (from its key file, here: a bin/berth start costs 15-20 s under TCG);
    // the host verifies the cleanups' certificates with it.
    if (plan.cleanups.length > 0) emitPublicKey();
    if (plan.writeAfterClean) await writeAfterClean(endpoint, plan.writeAfterClean);
    if (plan.hotplug) {
      await rpc(endpoint, 'GetAgentInfo', {});
      await followHotplug(endpoint, plan.hotplug);
      await rpc(endpoint, 'GetAgentInfo', {});
    }
    if (plan.listDevices) await rpc(endpoint, 'ListDevices', {});
  } finally {
    await stopAgent(agent);
    emit({ type: 'agent-log', lines: agent.stderr });
  }
  if (plan.saveState) {
    mkdirSync(plan.saveState, { recursive: true });
    cpSync(stateDir(), plan.saveState, { recursive: true });
    emit({ type: 'state', saved: readdirSync(plan.saveState).sort() });
  }

  for (const p of plan.probes) {
    const ns = firstNamespaceOf(p.address);
    await command(
      `probe ${p.address}`,
      p.argv.map((a) => (a === '{ns}' ? ns : a)),
    );
  }
}

main()
  .catch((e: unknown) =>
    emit({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) }),
  )
  .finally(() => {
    emit({ type: 'done', uptime: uptime() });
    process.exit(0);
  });
