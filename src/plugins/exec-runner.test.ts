import { readFileSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../test/helpers/wait.js';
import { ExecRunner } from './exec-runner.js';

/** Alive = exists and is not a zombie waiting for an (unrelated) reaper. */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

describe('ExecRunner', () => {
  let dir: string;
  const runner = new ExecRunner({ killGraceMs: 300 });

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-exec-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** A script that starts a grandchild sleep, records its pid, then waits. */
  async function forkingScript(): Promise<{ script: string; pidFile: string }> {
    const pidFile = join(dir, 'grandchild.pid');
    const script = join(dir, 'fork.sh');
    await writeFile(script, `#!/bin/sh\nsleep 30 &\necho $! > '${pidFile}'\nwait\n`);
    await chmod(script, 0o755);
    return { script, pidFile };
  }

  it('collects stdout and the exit code', async () => {
    const r = await runner.run('sh', ['-c', 'printf hello; exit 0']);
    expect(r).toMatchObject({ code: 0, signal: null, stdout: 'hello', timedOut: false, aborted: false });
  });

  it('reports non-zero exit codes and captures stderr without rejecting', async () => {
    const r = await runner.run('sh', ['-c', 'echo "NVMe status: bad(0x4002)" >&2; exit 1']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('NVMe status: bad(0x4002)\n');
  });

  it('passes arguments verbatim, never through a shell', async () => {
    const r = await runner.run('printf', ['%s|', '$(echo pwned)', 'a b', ';ls']);
    expect(r.stdout).toBe('$(echo pwned)|a b|;ls|');
  });

  it('always sets LC_ALL=C, even over a caller-provided value', async () => {
    const r = await runner.run('sh', ['-c', 'echo "$LC_ALL $FOO"'], {
      env: { LC_ALL: 'fr_FR.UTF-8', FOO: 'bar' },
    });
    expect(r.stdout.trim()).toBe('C bar');
  });

  it('streams stdout and stderr chunks to the callbacks', async () => {
    const out: string[] = [];
    const err: string[] = [];
    await runner.run('sh', ['-c', 'echo one; echo two >&2; echo three'], {
      onStdout: (c) => out.push(c),
      onStderr: (c) => err.push(c),
    });
    expect(out.join('')).toBe('one\nthree\n');
    expect(err.join('')).toBe('two\n');
  });

  it('caps the collected output but keeps the tail', async () => {
    const small = new ExecRunner({ maxOutputBytes: 1000 });
    const r = await small.run('sh', ['-c', 'i=0; while [ $i -lt 500 ]; do echo line$i; i=$((i+1)); done']);
    expect(r.stdout.length).toBeLessThan(1100);
    expect(r.stdout).toContain('line499');
    expect(r.stdout).toContain('[...truncated]');
  });

  it('rejects with code ENOENT when the program does not exist', async () => {
    await expect(runner.run(join(dir, 'no-such-tool'), [])).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('rejects with code EACCES when the program is not executable', async () => {
    const f = join(dir, 'not-exec');
    await writeFile(f, '#!/bin/sh\n');
    await chmod(f, 0o644);
    // root may bypass the mode bits for reading, but not for executing a file with no x bit.
    await expect(runner.run(f, [])).rejects.toMatchObject({ code: 'EACCES' });
  });

  it('kills a sleep at the timeout and sets timedOut', async () => {
    const start = Date.now();
    const r = await runner.run('sleep', ['30'], { timeoutMs: 100 });
    expect(r.timedOut).toBe(true);
    expect(r.aborted).toBe(false);
    expect(r.code).toBeNull();
    expect(r.signal).toBe('SIGTERM');
    expect(Date.now() - start).toBeLessThan(5000);
  });

  it('kills the whole process group at the timeout, grandchildren included', async () => {
    const { script, pidFile } = await forkingScript();
    const r = await runner.run(script, [], { timeoutMs: 300 });
    expect(r.timedOut).toBe(true);
    const grandchild = Number((await readFile(pidFile, 'utf8')).trim());
    expect(grandchild).toBeGreaterThan(0);
    await waitFor(() => !isAlive(grandchild), 3_000, 'the grandchild to be gone');
  });

  it('escalates to SIGKILL when the group ignores SIGTERM', async () => {
    const r = await runner.run('sh', ['-c', "trap '' TERM; sleep 30 & wait; wait"], { timeoutMs: 100 });
    expect(r.timedOut).toBe(true);
    expect(r.signal).toBe('SIGKILL');
  });

  it('kills the group when the abort signal fires and sets aborted', async () => {
    const { script, pidFile } = await forkingScript();
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    const r = await runner.run(script, [], { signal: ac.signal });
    expect(r.aborted).toBe(true);
    expect(r.timedOut).toBe(false);
    const grandchild = Number((await readFile(pidFile, 'utf8')).trim());
    await waitFor(() => !isAlive(grandchild), 3_000, 'the grandchild to be gone');
  });

  it('does not start anything when the signal is already aborted', async () => {
    const marker = join(dir, 'ran');
    const r = await runner.run('touch', [marker], { signal: AbortSignal.abort() });
    expect(r.aborted).toBe(true);
    await expect(readFile(marker)).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
