/**
 * The guest's initramfs, built from this machine's own files: the static
 * busybox, the kernel's modules in load order, the init script, and the files
 * the orchestrator needs (copied to /berth). Everything else (node, nvme-cli,
 * the checkout) the guest reads from the host's root over 9p. An uncompressed
 * newc cpio archive, written by busybox's own cpio.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';

export interface InitramfsContent {
  busybox: string;
  /** The init script (test/vm/guest/init.sh). */
  init: string;
  /** Kernel modules in load order. */
  modules: string[];
  /** Files under /berth: name → content and mode. */
  files: Record<string, { data: string | Uint8Array; mode?: number }>;
}

function walk(root: string, dir = ''): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
    const rel = dir === '' ? e.name : `${dir}/${e.name}`;
    out.push(rel);
    if (e.isDirectory()) out.push(...walk(root, rel));
  }
  return out;
}

/** Stages the tree in `<out>.root` and archives it into `out`. */
export function buildInitramfs(out: string, content: InitramfsContent): void {
  const root = `${out}.root`;
  for (const d of ['bin', 'lib/modules', 'berth', 'proc', 'sys', 'dev', 'host', 'tmp']) {
    mkdirSync(join(root, d), { recursive: true });
  }
  copyFileSync(content.busybox, join(root, 'bin/busybox'));
  copyFileSync(content.init, join(root, 'init'));
  for (const m of content.modules) copyFileSync(m, join(root, 'lib/modules', basename(m)));
  writeFileSync(join(root, 'lib/modules/order'), `${content.modules.map((m) => basename(m)).join('\n')}\n`);
  for (const [name, f] of Object.entries(content.files)) {
    writeFileSync(join(root, 'berth', name), f.data, { mode: f.mode ?? 0o644 });
  }
  chmodSync(join(root, 'init'), 0o755);
  chmodSync(join(root, 'bin/busybox'), 0o755);
  execFileSync(content.busybox, ['cpio', '-o', '-H', 'newc', '-F', out], {
    cwd: root,
    input: `${walk(root).join('\n')}\n`,
    stdio: ['pipe', 'ignore', 'pipe'],
  });
}
