import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { tempDir } from '../../../test/helpers/agent.js';
import { Coalescer, type SourceStatus, UdevadmSource } from './hotplug.js';
import type { Uevent } from './uevent.js';

describe('Coalescer', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A coalescer whose runs are held open until `finish()`; records batches and overlaps. */
  /** `maxDelayMs` null: the Coalescer's default. */
  function harness(settleMs = 50, maxDelayMs: number | null = 500) {
    const batches: string[][] = [];
    let inFlight = 0;
    let maxInFlight = 0;
    let finish: () => void = () => {};
    const c = new Coalescer({
      settleMs,
      ...(maxDelayMs === null ? {} : { maxDelayMs }),
      run: (batch) => {
        batches.push([...batch].sort());
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        return new Promise<void>((resolve) => {
          finish = () => {
            inFlight--;
            resolve();
          };
        });
      },
    });
    return { c, batches, finish: () => finish(), maxInFlight: () => maxInFlight };
  }

  it('turns a burst (256 VFs enabled) into one batch once the source is quiet', async () => {
    const h = harness();
    for (let i = 0; i < 256; i++) {
      h.c.add([`0000:3b:${(2 + (i >> 3)).toString(16).padStart(2, '0')}.${i & 7}`]);
      await vi.advanceTimersByTimeAsync(0.1);
    }
    expect(h.batches).toEqual([]);
    await vi.advanceTimersByTimeAsync(49);
    expect(h.batches).toEqual([]);
    await vi.advanceTimersByTimeAsync(2);
    expect(h.batches).toHaveLength(1);
    expect(h.batches[0]).toHaveLength(256);
    h.finish();
  });

  it('the same address many times is re-read once', async () => {
    const h = harness();
    for (let i = 0; i < 10; i++) h.c.add(['0000:05:00.0']);
    await vi.advanceTimersByTimeAsync(60);
    expect(h.batches).toEqual([['0000:05:00.0']]);
    h.finish();
  });

  it('a source that never goes quiet still gets a batch out at maxDelay', async () => {
    const h = harness(50, 500);
    for (let t = 0; t < 600; t += 20) {
      h.c.add([`0000:05:00.${(t / 20) % 8}`]);
      await vi.advanceTimersByTimeAsync(20);
    }
    expect(h.batches.length).toBe(1);
    h.finish();
  });

  it("a busy source's first batch goes two settles after its first key by default (decision 97)", async () => {
    const h = harness(50, null);
    // A key every 10 ms (the kernel making VFs one by one): the settle never passes.
    for (let t = 0; t < 90; t += 10) {
      h.c.add([`0000:05:00.${(t / 10) % 8}`]);
      await vi.advanceTimersByTimeAsync(10);
    }
    h.c.add(['0000:05:01.0']);
    await vi.advanceTimersByTimeAsync(9);
    expect(h.batches).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    // Ten settles before: nothing ran until 500 ms.
    expect(h.batches.length).toBe(1);
    h.finish();
  });

  it('never runs two batches at once: what comes meanwhile is the next batch', async () => {
    const h = harness();
    h.c.add(['0000:05:00.0']);
    await vi.advanceTimersByTimeAsync(60);
    expect(h.batches).toEqual([['0000:05:00.0']]);
    h.c.add(['0000:05:00.1']);
    h.c.add(['0000:05:00.2']);
    await vi.advanceTimersByTimeAsync(1000);
    expect(h.batches).toHaveLength(1);
    h.finish();
    await vi.advanceTimersByTimeAsync(60);
    expect(h.batches).toEqual([['0000:05:00.0'], ['0000:05:00.1', '0000:05:00.2']]);
    expect(h.maxInFlight()).toBe(1);
    h.finish();
  });

  it('what came during a run goes one settle after it, however busy the source', async () => {
    const h = harness(50, 500);
    h.c.add(['0000:05:00.0']);
    await vi.advanceTimersByTimeAsync(60);
    expect(h.batches).toHaveLength(1);
    // A source that never goes quiet: a key every 10 ms, during the run and after it.
    let i = 0;
    const more = async (ms: number) => {
      for (let t = 0; t < ms; t += 10) {
        h.c.add([`0000:06:${(i >> 3).toString(16).padStart(2, '0')}.${i++ & 7}`]);
        await vi.advanceTimersByTimeAsync(10);
      }
    };
    await more(200);
    expect(h.batches).toHaveLength(1);
    h.finish();
    // The keys of the run waited 200 ms already: not the 500 ms maxDelay again, one settle.
    await more(40);
    expect(h.batches).toHaveLength(1);
    await more(20);
    expect(h.batches).toHaveLength(2);
    expect(h.batches[1]!.length).toBeGreaterThanOrEqual(20);
    h.finish();
  });

  it('a failed batch does not stop the next; close drops what is pending', async () => {
    const seen: string[][] = [];
    const c = new Coalescer({
      settleMs: 10,
      maxDelayMs: 100,
      run: async (batch) => {
        seen.push([...batch]);
        throw new Error('driver failed');
      },
    });
    c.add(['a']);
    await vi.advanceTimersByTimeAsync(20);
    c.add(['b']);
    await vi.advanceTimersByTimeAsync(20);
    expect(seen).toEqual([['a'], ['b']]);
    c.add(['c']);
    await c.close();
    await vi.advanceTimersByTimeAsync(100);
    expect(seen).toEqual([['a'], ['b']]);
  });
});

describe('UdevadmSource', () => {
  const logger = pino({ level: 'silent' });
  let dir: { path: string; cleanup(): Promise<void> };
  const sources: UdevadmSource[] = [];
  afterEach(async () => {
    for (const s of sources.splice(0)) await s.stop();
  });
  beforeAll(async () => {
    dir = await tempDir('berth-hotplug-');
  });
  afterAll(async () => dir?.cleanup());

  /** A fake udevadm: a shell script (what it does is the test's). */
  async function fake(name: string, body: string): Promise<string> {
    const p = join(dir.path, name);
    await writeFile(p, `#!/bin/sh\n${body}\n`);
    await chmod(p, 0o755);
    return p;
  }

  function start(command: string, readyTimeoutMs = 10_000) {
    const statuses: SourceStatus[] = [];
    const events: Uevent[] = [];
    const waiters: (() => void)[] = [];
    const poke = () => {
      for (const w of waiters.splice(0)) w();
    };
    const s = new UdevadmSource({
      command,
      logger,
      readyTimeoutMs,
      backoffMs: { initial: 20, max: 80 },
      onEvent: (e) => {
        events.push(e);
        poke();
      },
      onStatus: (st) => {
        statuses.push(st);
        poke();
      },
    });
    sources.push(s);
    s.start();
    const until = async (test: () => boolean) => {
      while (!test()) await new Promise<void>((r) => waiters.push(r));
    };
    return { s, statuses, events, until };
  }

  it('says it follows once the header ends, passes events on, and runs udevadm monitor --kernel for pci, nvme and block', async () => {
    const argsFile = join(dir.path, 'args');
    const cmd = await fake(
      'udevadm-ok',
      `echo "$@" > '${argsFile}'
printf 'monitor will print the received events for:\\nKERNEL - the kernel uevent\\n\\n'
printf 'KERNEL[1.000001] add      /devices/pci0000:00/0000:05:00.0 (pci)\\nACTION=add\\n\\n'
exec sleep 600`,
    );
    const h = start(cmd);
    await h.until(() => h.events.length === 1);
    expect(h.statuses.map((x) => x.state)).toEqual(['following']);
    expect(h.events[0]).toMatchObject({ action: 'add', devpath: '/devices/pci0000:00/0000:05:00.0' });
    const { readFile } = await import('node:fs/promises');
    expect((await readFile(argsFile, 'utf8')).trim()).toBe(
      'monitor --kernel --subsystem-match=pci --subsystem-match=nvme --subsystem-match=block',
    );
  });

  it('a program that cannot run: failed with the reason, and tried again with a backoff', async () => {
    const h = start(join('/nonexistent', 'udevadm'));
    await h.until(() => h.statuses.filter((x) => x.state === 'failed').length >= 3);
    const failed = h.statuses.filter((x) => x.state === 'failed');
    expect(failed[0]!.message).toBe('cannot run /nonexistent/udevadm: ENOENT');
    expect(failed.at(-1)!.restarts).toBeGreaterThanOrEqual(2);
  });

  it('a source that dies: failed with its exit and what it printed, then back to following', async () => {
    const flag = join(dir.path, 'died-once');
    const cmd = await fake(
      'udevadm-dies',
      `if [ ! -e '${flag}' ]; then touch '${flag}'; echo 'Failed to receive uevent: No buffer space available' >&2; exit 3; fi
printf 'monitor will print the received events for:\\nKERNEL - the kernel uevent\\n\\n'
exec sleep 600`,
    );
    const h = start(cmd);
    await h.until(() => h.statuses.some((x) => x.state === 'following'));
    expect(h.statuses.map((x) => x.state)).toEqual(['failed', 'starting', 'following']);
    expect(h.statuses[0]!.message).toBe(
      `${cmd} monitor --kernel --subsystem-match=pci --subsystem-match=nvme --subsystem-match=block exited with code 3: Failed to receive uevent: No buffer space available`,
    );
    expect(h.s.status.restarts).toBe(1);
    // Killed while following: failed again, and started again.
    process.kill(h.s.pid!, 'SIGKILL');
    await h.until(() => h.statuses.filter((x) => x.state === 'following').length === 2);
    expect(h.statuses.map((x) => x.state)).toEqual([
      'failed',
      'starting',
      'following',
      'failed',
      'starting',
      'following',
    ]);
    expect(h.statuses[3]!.message).toMatch(/was killed by SIGKILL$/);
  });

  it('a source that prints no header in time is killed and counts as failed', async () => {
    const cmd = await fake('udevadm-mute', 'exec sleep 600');
    const h = start(cmd, 100);
    await h.until(() => h.statuses.some((x) => x.state === 'failed'));
    expect(h.statuses[0]!.message).toMatch(/no header from .* within 100 ms$/);
  });

  it('stop ends the child and every retry', async () => {
    const cmd = await fake(
      'udevadm-stop',
      `printf 'monitor will print the received events for:\\nKERNEL - the kernel uevent\\n\\n'\nexec sleep 600`,
    );
    const h = start(cmd);
    await h.until(() => h.statuses.some((x) => x.state === 'following'));
    const pid = h.s.pid!;
    await h.s.stop();
    expect(() => process.kill(pid, 0)).toThrow();
    expect(h.statuses.map((x) => x.state)).toEqual(['following']);
  });
});
