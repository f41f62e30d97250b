/**
 * The discovery floor: what it costs one process to do nothing but the sysfs
 * operations Berth's discovery does, in the same order.
 *
 * The list is not written by hand: `recordSysfsOps` runs Berth's own discovery
 * once with node:fs's functions wrapped (and the wrappers pushed into the ES
 * module bindings with `syncBuiltinESMExports`, so the reader's named imports
 * see them), and records every operation on a path under the sysfs root —
 * open (then read), readlink, readdir, existence probe, realpath — in call
 * order. If the reader starts using a call the recorder does not know, it
 * throws instead of producing a shorter list.
 *
 * The floor replays that list: a tiny C program compiled at bench time when
 * `cc` exists (open/read 4 KiB/close, readlink, opendir/readdir/closedir,
 * access, realpath), or else one `cat` over the files read (a weaker floor:
 * only the reads, recorded in the result's note).
 */
import { execFile } from 'node:child_process';
import fs, {
  closeSync,
  existsSync,
  opendirSync,
  openSync,
  readdirSync,
  readlinkSync,
  readSync,
  realpathSync,
} from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * r: open + read + close; l: readlink; d: readdir (every entry); e: a
 * directory's first entry (opendir, one read, close); s: existence probe;
 * p: realpath.
 */
export type SysfsOp = 'r' | 'l' | 'd' | 'e' | 's' | 'p';

const SYNC_OPS: Record<string, SysfsOp> = {
  openSync: 'r',
  readFileSync: 'r',
  readlinkSync: 'l',
  readdirSync: 'd',
  opendirSync: 'e',
  existsSync: 's',
  statSync: 's',
  lstatSync: 's',
  accessSync: 's',
  realpathSync: 'p',
};
const ASYNC_OPS: Record<string, SysfsOp> = {
  open: 'r',
  readFile: 'r',
  readlink: 'l',
  readdir: 'd',
  opendir: 'e',
  stat: 's',
  lstat: 's',
  access: 's',
  realpath: 'p',
};

/**
 * Runs `fn` (Berth's discovery) with node:fs recorded; returns the operations
 * on paths under `root`, in order. Any other fs call on such a path is an error.
 */
export async function recordSysfsOps<T>(
  root: string,
  fn: () => Promise<T>,
): Promise<{ ops: [SysfsOp, string][]; value: T }> {
  const ops: [SysfsOp, string][] = [];
  const unknown = new Set<string>();
  const under = (p: unknown) => typeof p === 'string' && (p === root || p.startsWith(`${root}/`));
  const saved: [Record<string, unknown>, string, unknown][] = [];
  const wrap = (target: Record<string, unknown>, table: Record<string, SysfsOp>) => {
    for (const name of Object.keys(target)) {
      const orig = target[name];
      if (typeof orig !== 'function' || name.endsWith('Stream') || /^[A-Z]/.test(name)) continue;
      saved.push([target, name, orig]);
      const op = table[name];
      target[name] = function (this: unknown, ...args: unknown[]) {
        if (under(args[0])) {
          if (op) ops.push([op, args[0] as string]);
          else unknown.add(name);
        }
        return (orig as (...a: unknown[]) => unknown).apply(this, args);
      };
    }
  };
  wrap(fs as unknown as Record<string, unknown>, SYNC_OPS);
  wrap(fs.promises as unknown as Record<string, unknown>, ASYNC_OPS);
  syncBuiltinESMExports();
  let value: T;
  try {
    value = await fn();
  } finally {
    for (const [target, name, orig] of saved) target[name] = orig;
    syncBuiltinESMExports();
  }
  // readSync/closeSync follow an open on its fd (no path): the 'r' covers them.
  if (unknown.size > 0) {
    throw new Error(`discovery used fs calls the floor does not replay: ${[...unknown].join(', ')}`);
  }
  return { ops, value };
}

const READER_C = String.raw`
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
/*
 * Replays "<op> <path>" lines: r open+read+close, l readlink, d readdir,
 * e opendir + first readdir + closedir, s access, p realpath. The list is
 * loaded first; only the replay is timed (no process start, no parsing).
 * Prints: ok failed bytes nanoseconds.
 */
int main(int argc, char **argv) {
  if (argc != 2) return 2;
  FILE *f = fopen(argv[1], "r");
  if (!f) return 2;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  char *text = malloc(size + 1);
  if (!text || fread(text, 1, size, f) != (size_t)size) return 2;
  text[size] = 0;
  fclose(f);
  long lines = 0;
  for (long i = 0; i < size; i++) if (text[i] == '\n') { text[i] = 0; lines++; }
  char **line = malloc(sizeof(char *) * (lines + 1));
  long n = 0;
  for (char *p = text; p < text + size; p += strlen(p) + 1) if (strlen(p) > 2) line[n++] = p;
  static char buf[4096], out[PATH_MAX];
  long ok = 0, failed = 0, bytes = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) {
    const char *p = line[i] + 2;
    int good = 0;
    switch (line[i][0]) {
    case 'r': {
      int fd = open(p, O_RDONLY);
      if (fd >= 0) { ssize_t r = pread(fd, buf, sizeof buf, 0); if (r >= 0) { bytes += r; good = 1; } close(fd); }
      break;
    }
    case 'l': good = readlink(p, out, sizeof out) >= 0; break;
    case 'd': {
      DIR *d = opendir(p);
      if (d) { while (readdir(d)) ; closedir(d); good = 1; }
      break;
    }
    case 'e': {
      DIR *d = opendir(p);
      if (d) { readdir(d); closedir(d); good = 1; }
      break;
    }
    case 's': good = access(p, F_OK) == 0; break;
    case 'p': good = realpath(p, out) != NULL; break;
    default: return 3;
    }
    if (good) ok++; else failed++;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long long ns = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
  printf("%ld %ld %ld %lld\n", ok, failed, bytes, ns);
  return 0;
}
`;

export interface Floor {
  /** 'c' (the compiled replayer) or 'cat' (reads only). */
  kind: 'c' | 'cat';
  /**
   * Runs the floor once. `ms`: the replay alone for c (timed inside the
   * program: no process start, no list parsing), the whole process for cat.
   * `processMs`: the whole process, start to exit, as lspci is timed.
   * `did`: what it did ("ok failed bytes" for c).
   */
  run(): Promise<{ ms: number; processMs: number; did: string }>;
  note: string;
}

/** Writes the op list into `dir` and builds the floor that replays it. */
export async function buildFloor(dir: string, ops: readonly [SysfsOp, string][]): Promise<Floor> {
  const list = join(dir, 'sysfs-ops.txt');
  await writeFile(list, ops.map(([op, p]) => `${op} ${p}\n`).join(''));
  const src = join(dir, 'sysfs-floor.c');
  const bin = join(dir, 'sysfs-floor');
  await writeFile(src, READER_C);
  try {
    await run('cc', ['-O2', '-o', bin, src]);
    return {
      kind: 'c',
      run: async () => {
        const t0 = performance.now();
        const { stdout } = await run(bin, [list]);
        const processMs = performance.now() - t0;
        const [ok, failed, bytes, ns] = stdout.trim().split(' ');
        return { ms: Number(ns) / 1e6, processMs, did: `${ok} ok, ${failed} absent, ${bytes} bytes` };
      },
      note: 'a C program replaying every recorded operation (open+read, readlink, readdir, access, realpath), timed inside the program',
    };
  } catch {
    const files = ops.filter(([op]) => op === 'r').map(([, p]) => p);
    const catList = join(dir, 'sysfs-reads.txt');
    await writeFile(catList, files.join('\0'));
    return {
      kind: 'cat',
      // cat goes on past files that are absent; its exit status says some were.
      run: async () => {
        const t0 = performance.now();
        const r = await run('sh', ['-c', 'xargs -0 cat -- < "$1" > /dev/null 2>&1; echo $?', 'sh', catList]);
        const ms = performance.now() - t0;
        return { ms, processMs: ms, did: `cat exit ${r.stdout.trim()}` };
      },
      note: `cc not found: cat (through xargs) over the ${files.length} files read, timed as a process (no readdir/readlink/realpath)`,
    };
  }
}

/**
 * The same operations replayed by bare node:fs calls in this process, with no
 * parsing or matching: what Node's fs bindings alone cost for Berth's list —
 * the part of Berth's time a JavaScript reader cannot remove. Returns ms.
 */
export function replayInNode(ops: readonly [SysfsOp, string][]): number {
  const buf = Buffer.alloc(4096);
  const t0 = performance.now();
  for (const [op, p] of ops) {
    try {
      if (op === 'r') {
        const fd = openSync(p, 'r');
        try {
          readSync(fd, buf, 0, buf.length, 0);
        } finally {
          closeSync(fd);
        }
      } else if (op === 'l') readlinkSync(p);
      else if (op === 'd') readdirSync(p);
      else if (op === 'e') {
        const d = opendirSync(p);
        try {
          d.readSync();
        } finally {
          d.closeSync();
        }
      } else if (op === 's') existsSync(p);
      else realpathSync(p);
    } catch {
      // absent, as for Berth's reader
    }
  }
  return performance.now() - t0;
}
