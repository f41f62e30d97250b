/**
 * A tiny tmpfs (root only) for full-disk tests: mounted on a fresh directory
 * under `parent`, or null (with the reason) when this machine cannot mount
 * one. The returned `unmount` is lazy, so a process still holding a file
 * there does not block the test's cleanup.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

export type Tmpfs = { path: string; unmount: () => Promise<void> } | { path: null; why: string };

export function mountTinyTmpfs(parent: string, name: string, size: string): Tmpfs {
  const path = join(parent, name);
  mkdirSync(path);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', path], { stdio: 'pipe' });
  } catch (e) {
    return { path: null, why: `cannot mount a tmpfs here: ${(e as Error).message.split('\n')[0]}` };
  }
  return { path, unmount: async () => void execFileSync('umount', ['-l', path]) };
}
