/** Loop devices (real block devices backed by a file) for tests and benchmarks that need them, as root. */
import { execFileSync } from 'node:child_process';
import { available, losetup, root } from './prerequisites.js';

/** Why loop devices cannot be used here ('not root', 'losetup missing'), or null when they can. */
export function loopUnsupported(): string | null {
  return root().missing ?? losetup().missing;
}

/**
 * For a test: whether loop devices can be used, saying in one line why not
 * (and failing instead when BERTH_REQUIRE_TOOLS=1 and losetup is missing).
 */
export function loopAvailable(what: string): boolean {
  return available(root(), what) && available(losetup(), what);
}

/** Attaches `file` to a free loop device: its path, or the reason it could not. */
export function attachLoop(file: string): { dev: string | null; reason: string } {
  const unsupported = loopUnsupported();
  if (unsupported) return { dev: null, reason: unsupported };
  try {
    return { dev: execFileSync('losetup', ['-f', '--show', file], { encoding: 'utf8' }).trim(), reason: '' };
  } catch (e) {
    return { dev: null, reason: `losetup failed: ${(e as Error).message.split('\n')[0]}` };
  }
}

export function detachLoop(dev: string): void {
  execFileSync('losetup', ['-d', dev]);
}
