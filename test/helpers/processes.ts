/**
 * Real `bin/berth scheduler serve` and `bin/berth agent serve` processes for
 * crash tests. In-process servers cannot be SIGKILLed, and a graceful stop is
 * exactly what a crash test must not get; so these run as child processes,
 * each in its own process group (detached) so that a kill reaches the CLI and
 * every child it started (nvme-cli simulators hung on a fault included).
 *
 * Every process started here is tracked; `stopAllProcesses()` (call it from
 * afterAll/afterEach) SIGKILLs whatever is still running, and an `exit` hook
 * does the same if the test worker dies first, so no test leaves a process behind.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify as toYaml } from 'yaml';
import type { SimHost } from '../../src/sim/host.js';
import type { LogLine } from './logs.js';
import { waitFor } from './wait.js';

const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BERTH = join(REPO, 'bin', 'berth');
/** Output kept per process for failure messages; older output is dropped. */
const KEEP_CHARS = 64 * 1024;
const START_TIMEOUT_MS = 30_000;
const EXIT_TIMEOUT_MS = 10_000;
/** Parsed log lines kept per process (the newest). */
const KEEP_LINES = 20_000;

/** A free TCP port on 127.0.0.1, so a restarted process can take the same endpoint. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port ? resolve(port) : reject(new Error('no port assigned'))));
    });
  });
}

const live = new Set<BerthProcess>();

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // Already gone (ESRCH): nothing to kill.
  }
}

// Last resort when the worker exits without running afterAll (a crash, a timeout kill).
process.on('exit', () => {
  for (const p of live) if (p.pid) killGroup(p.pid, 'SIGKILL');
});

export interface ProcessSpec {
  /** A name for messages ("scheduler", "agent sim-host-1"). */
  name: string;
  /** Arguments after `bin/berth`. */
  args: string[];
  env?: Record<string, string>;
  /** How long start() waits for the "listening" line (default 30 s). */
  startTimeoutMs?: number;
}

/**
 * One berth server process. `start()` resolves once it printed its
 * `{"event":"listening"}` line; `restart()` starts the same command again
 * (same ports, state dir, db) after the previous process is gone.
 */
export class BerthProcess {
  private child: ChildProcess | null = null;
  private exitPromise: Promise<{ code: number | null; signal: NodeJS.Signals | null }> | null = null;
  private stderrBuf = '';
  private stdoutBuf = '';
  private stderrPending = '';
  /** The JSON log lines (stderr) of every start so far, parsed, each with the start it came from. */
  readonly logLines: (LogLine & { start: number })[] = [];
  endpoint = '';
  /** The whole `{"event":"listening",…}` line of the current start (a scheduler's `scheduler_id`, …). */
  listening: Record<string, unknown> = {};
  /** How many times the process was started. */
  starts = 0;

  constructor(readonly spec: ProcessSpec) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The tail of stderr (the JSON log) and stdout, for assertion messages. */
  output(): string {
    return `--- ${this.spec.name} stdout ---\n${this.stdoutBuf}\n--- ${this.spec.name} stderr ---\n${this.stderrBuf}`;
  }

  /**
   * Waits until `count` log lines (default 1) of the current start satisfy
   * `match` — the process's own account of what it did, for a test to wait
   * on before asserting that nothing else happened.
   */
  async waitForLog(
    match: (l: LogLine) => boolean,
    { count = 1, timeoutMs = 20_000, what = 'a log line' } = {},
  ): Promise<LogLine[]> {
    const mine = () => this.logLines.filter((l) => l.start === this.starts && match(l));
    await waitFor(() => mine().length >= count, timeoutMs, `${this.spec.name}: ${count} × ${what}`).catch(
      (err: Error) => {
        throw new Error(`${err.message}\n${this.output()}`);
      },
    );
    return mine();
  }

  async start(): Promise<string> {
    if (this.running) throw new Error(`${this.spec.name} is already running`);
    this.starts++;
    const child = spawn(BERTH, this.spec.args, {
      cwd: REPO,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        BERTH_LOG_LEVEL: process.env.BERTH_CHILD_LOG_LEVEL ?? 'info',
        ...this.spec.env,
        // The child is not under vitest: its logger must not go silent, nor
        // should it think it is a test worker.
        VITEST: '',
        VITEST_WORKER_ID: '',
        VITEST_POOL_ID: '',
      },
    });
    this.child = child;
    live.add(this);
    this.exitPromise = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        live.delete(this);
        resolve({ code, signal });
      });
    });
    const marker = `\n=== start ${this.starts} (pid ${child.pid}) ===\n`;
    this.stderrBuf = (this.stderrBuf + marker).slice(-KEEP_CHARS);
    this.stdoutBuf = (this.stdoutBuf + marker).slice(-KEEP_CHARS);
    child.stderr?.setEncoding('utf8');
    this.stderrPending = '';
    const start = this.starts;
    child.stderr?.on('data', (s: string) => {
      this.stderrBuf = (this.stderrBuf + s).slice(-KEEP_CHARS);
      this.stderrPending += s;
      let nl = this.stderrPending.indexOf('\n');
      while (nl >= 0) {
        const line = this.stderrPending.slice(0, nl).trim();
        this.stderrPending = this.stderrPending.slice(nl + 1);
        nl = this.stderrPending.indexOf('\n');
        if (!line.startsWith('{')) continue;
        try {
          this.logLines.push({ ...(JSON.parse(line) as LogLine), start });
        } catch {
          // Not a log line.
        }
      }
      if (this.logLines.length > KEEP_LINES) this.logLines.splice(0, this.logLines.length - KEEP_LINES);
    });
    child.stdout?.setEncoding('utf8');
    const endpoint = await new Promise<string>((resolve, reject) => {
      let pending = '';
      const limit = this.spec.startTimeoutMs ?? START_TIMEOUT_MS;
      const timer = setTimeout(() => {
        reject(new Error(`${this.spec.name}: no "listening" line after ${limit} ms\n${this.output()}`));
      }, limit);
      child.stdout?.on('data', (s: string) => {
        this.stdoutBuf = (this.stdoutBuf + s).slice(-KEEP_CHARS);
        pending += s;
        let nl = pending.indexOf('\n');
        while (nl >= 0) {
          const line = pending.slice(0, nl).trim();
          pending = pending.slice(nl + 1);
          nl = pending.indexOf('\n');
          if (!line.startsWith('{')) continue;
          try {
            const msg = JSON.parse(line) as { event?: string; endpoint?: string };
            if (msg.event === 'listening' && msg.endpoint) {
              this.listening = msg;
              clearTimeout(timer);
              resolve(msg.endpoint);
            }
          } catch {
            // Not our line.
          }
        }
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(
          new Error(
            `${this.spec.name} exited (code ${code}, signal ${signal}) before listening\n${this.output()}`,
          ),
        );
      });
      child.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    }).catch(async (err) => {
      await this.kill('SIGKILL');
      throw err;
    });
    this.endpoint = endpoint;
    return endpoint;
  }

  /**
   * Sends `signal` to the whole process group and waits for the process to
   * exit (SIGKILL after EXIT_TIMEOUT_MS if a gentler signal was ignored).
   */
  async kill(
    signal: NodeJS.Signals = 'SIGKILL',
  ): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    const child = this.child;
    if (!child?.pid || !this.exitPromise) return { code: null, signal: null };
    const pid = child.pid;
    if (!this.running) {
      // The leader is gone; its group may still hold children (a hung nvme-cli).
      killGroup(pid, 'SIGKILL');
      return this.exitPromise;
    }
    killGroup(pid, signal);
    let timer: NodeJS.Timeout | undefined;
    const result = await Promise.race([
      this.exitPromise,
      new Promise<null>((r) => {
        timer = setTimeout(() => r(null), EXIT_TIMEOUT_MS);
      }),
    ]);
    clearTimeout(timer);
    if (result) {
      // The group's other members (hung simulators) go with the leader.
      killGroup(pid, 'SIGKILL');
      return result;
    }
    killGroup(pid, 'SIGKILL');
    return this.exitPromise;
  }

  /** Sends a signal to the process group without waiting (SIGSTOP / SIGCONT to freeze and thaw). */
  signal(signal: NodeJS.Signals): void {
    if (this.running && this.child?.pid) killGroup(this.child.pid, signal);
  }

  /** A graceful stop (SIGTERM): the server drains as an operator's stop would. */
  stop(): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    return this.kill('SIGTERM');
  }

  /** Starts the same command again; the previous process must have exited (or is killed first). */
  async restart(): Promise<string> {
    if (this.running) await this.kill('SIGKILL');
    return this.start();
  }
}

/** SIGKILLs every process these helpers started that is still running. */
export async function stopAllProcesses(): Promise<void> {
  await Promise.all([...live].map((p) => p.kill('SIGKILL')));
}

/** `berth scheduler serve --db FILE|URL --listen 127.0.0.1:PORT` on a fixed port. */
export async function schedulerProcess(db: string, port?: number, name = 'scheduler'): Promise<BerthProcess> {
  const p = port ?? (await freePort());
  return new BerthProcess({
    name,
    args: ['scheduler', 'serve', '--db', db, '--listen', `127.0.0.1:${p}`, '--insecure-no-auth'],
  });
}

export interface AgentProcessOptions {
  /** Scheduler address (host:port), or several (the agent registers with the first live one). */
  scheduler: string | string[];
  /** Fixed agent port; default a free one, kept across restarts. */
  port?: number;
  /**
   * Keys merged into the sim host's agent config before it is written to
   * `sim.configPath` (e.g. a short `register_interval`, or `nvme.cleanup_timeout`).
   */
  config?: Record<string, unknown>;
}

/** Writes the sim host's agent config, with `patch` merged in (one level deep for sections). */
export async function writeAgentConfig(sim: SimHost, patch: Record<string, unknown> = {}): Promise<void> {
  const doc: Record<string, unknown> = { ...sim.agentConfig };
  for (const [k, v] of Object.entries(patch)) {
    const cur = doc[k];
    doc[k] =
      cur && typeof cur === 'object' && !Array.isArray(cur) && v && typeof v === 'object' && !Array.isArray(v)
        ? { ...(cur as Record<string, unknown>), ...(v as Record<string, unknown>) }
        : v;
  }
  await writeFile(sim.configPath, `# Written by test/helpers/processes.ts\n${toYaml(doc)}`);
}

/**
 * `berth agent serve --config <sim.configPath> --scheduler ADDR --listen 127.0.0.1:PORT`
 * for a host built with buildSimHost. The config gets a short register_interval
 * (so a restarted scheduler hears from the agent within a second) and a long
 * discovery interval (so rediscovery does not race the test) unless `config` says otherwise.
 */
export async function agentProcess(sim: SimHost, options: AgentProcessOptions): Promise<BerthProcess> {
  const port = options.port ?? (await freePort());
  const list = Array.isArray(options.scheduler);
  await writeAgentConfig(sim, {
    register_interval: 0.5,
    discovery_interval: 3600,
    ...(list ? { scheduler: options.scheduler } : {}),
    ...options.config,
  });
  return new BerthProcess({
    name: `agent ${sim.definition.host}`,
    args: [
      'agent',
      'serve',
      '--config',
      sim.configPath,
      ...(list ? [] : ['--scheduler', options.scheduler as string]),
      '--listen',
      `127.0.0.1:${port}`,
      '--state-dir',
      sim.stateDir,
    ],
  });
}
