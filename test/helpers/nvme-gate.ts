/**
 * A gate in front of a (simulated or real) nvme-cli: while it is closed, the
 * gated command waits before it runs, so a test can hold a cleanup job at a
 * known point — running, inside that command — for as long as it needs, and
 * let it go on when the condition it waits for holds. No timer decides
 * anything: the test waits for `reached()`, does what it must, then `open()`s.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { eventually } from './wait.js';

export interface Gate {
  /** The executable to use as nvme_cli. */
  nvmeCli: string;
  /** From now on the gated command waits (and `reached()` resolves when one does). */
  close(): void;
  /** Lets every waiting and later command through. */
  open(): void;
  /** Resolves once a gated command is waiting at the closed gate. */
  reached(timeoutMs?: number): Promise<void>;
  /** How many times the gated command has been run (open or closed). */
  calls(): number;
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export async function nvmeGate(dir: string, nvmeCli: string, command: string): Promise<Gate> {
  return nvmeGateSync(dir, nvmeCli, command);
}

/** nvmeGate, made synchronously (e.g. while an agent configuration is rewritten). */
export function nvmeGateSync(dir: string, nvmeCli: string, command: string): Gate {
  mkdirSync(dir, { recursive: true });
  const closed = join(dir, 'closed');
  const waiting = join(dir, 'waiting');
  const calls = join(dir, 'calls');
  const script = join(dir, 'nvme');
  writeFileSync(
    script,
    [
      '#!/bin/sh',
      `if [ "$1" = ${q(command)} ]; then echo >> ${q(calls)}; fi`,
      `if [ "$1" = ${q(command)} ] && [ -e ${q(closed)} ]; then`,
      `  : > ${q(waiting)}`,
      `  while [ -e ${q(closed)} ]; do sleep 0.02; done`,
      'fi',
      `exec ${q(nvmeCli)} "$@"`,
      '',
    ].join('\n'),
  );
  chmodSync(script, 0o755);
  return {
    nvmeCli: script,
    close() {
      rmSync(waiting, { force: true });
      writeFileSync(closed, '');
    },
    open() {
      rmSync(closed, { force: true });
    },
    calls() {
      return existsSync(calls) ? readFileSync(calls, 'utf8').length : 0;
    },
    async reached(timeoutMs = 60_000) {
      await eventually(
        () => existsSync(waiting),
        (v) => v,
        timeoutMs,
      );
    },
  };
}
