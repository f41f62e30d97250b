import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { available, REAL_NVME, realNvmeCli } from '../../../test/helpers/prerequisites.js';
import { parseArgs, strtoul } from './args.js';
import { int32, jsonPrint, uint128String } from './json-print.js';
import { cliEnvFrom, runCli } from './main.js';

const haveReal = available(realNvmeCli(), 'parity tests of the simulator against the real nvme-cli');

/** The real nvme-cli 2.3, for messages it produces without hardware. */
function real(args: string[]) {
  const r = spawnSync(REAL_NVME, args, { encoding: 'utf8', env: { ...process.env, LC_ALL: 'C' } });
  return { stdout: r.stdout, stderr: r.stderr, code: r.status };
}

/** The simulator in-process, with no state: every device is missing, like on this host. */
async function sim(args: string[]) {
  const r = await runCli(args, { ...cliEnvFrom({}), statePath: undefined });
  return { stdout: r.stdout, stderr: r.stderr, code: r.code };
}

describe('parseArgs (getopt_long_only + argconfig)', () => {
  const specs = [
    { long: 'namespace-id', short: 'n', kind: 'word' as const },
    { long: 'start-block', short: 's', kind: 'suffix' as const },
    { long: 'block-count', short: 'c', kind: 'short' as const },
    { long: 'force', kind: 'flag' as const },
    { long: 'verbose', short: 'v', kind: 'flag' as const },
    { long: 'binary', short: 'b', kind: 'flag' as const },
  ];

  it('accepts single-dash long options, unique prefixes, = and separate values, permuted positionals', () => {
    const r = parseArgs(
      'x',
      ['-namespace-id=7', 'dev', '--start', '0x10', '-block-c', '3', '-f', '-vb'],
      specs,
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.args.positionals).toEqual(['dev']);
    expect(r.args.opts.get('namespace-id')).toBe(7);
    expect(r.args.opts.get('start-block')).toBe(16n);
    expect(r.args.opts.get('block-count')).toBe(3);
    expect(r.args.opts.get('force')).toBe(true);
    expect(r.args.opts.get('verbose')).toBe(true);
    expect(r.args.opts.get('binary')).toBe(true);
  });

  it('treats a one-letter valid short option as short, with attached values', () => {
    const r = parseArgs('x', ['-n1', '-c', '0', '-s', '1k'], specs);
    expect(r.ok && r.args.opts.get('namespace-id')).toBe(1);
    expect(r.ok && r.args.opts.get('start-block')).toBe(1024n);
  });

  it('wraps -1 to 0xFFFFFFFF for word options and rejects it for short ones', () => {
    const r = parseArgs('x', ['-n', '-1'], specs);
    expect(r.ok && r.args.opts.get('namespace-id')).toBe(0xffffffff);
    expect(parseArgs('x', ['-c', '-1'], specs)).toEqual({
      ok: false,
      message: "Expected short argument for 'block-count' but got '-1'!\n",
      help: false,
    });
  });

  it('implements C strtoul base detection', () => {
    expect(strtoul('0x1f')).toEqual({ value: 31n, end: 4, overflow: false });
    expect(strtoul('010')).toEqual({ value: 8n, end: 3, overflow: false });
    expect(strtoul('12abc')).toEqual({ value: 12n, end: 2, overflow: false });
    expect(strtoul('abc').end).toBe(0);
  });
});

describe('json-print (json-c 0.16 pretty, nvme-cli 2.3 types)', () => {
  it('prints int32-wrapped u32 values, string capacities and empty arrays like json-c', () => {
    expect(int32(0xa0000003)).toBe(-1610612733);
    expect(int32(0xffffffff)).toBe(-1);
    expect(uint128String(3200631791616, { LC_ALL: 'C' })).toBe('3200631791616');
    expect(uint128String(3200631791616, { LANG: 'en_US.UTF-8' })).toBe('3,200,631,791,616');
    expect(jsonPrint({ a: 1, b: [], c: { d: '/dev/x "q"' } })).toBe(
      '{\n  "a":1,\n  "b":[\n  ],\n  "c":{\n    "d":"/dev/x \\"q\\""\n  }\n}\n',
    );
  });
});

describe.skipIf(!haveReal)('parity with the real nvme-cli 2.3 (no hardware needed)', () => {
  const cases: string[][] = [
    ['write-zeroes', '/dev/nvme9', '-c', '65536'],
    ['write-zeroes', '/dev/nvme9', '-c', 'abc'],
    ['write-zeroes', '/dev/nvme9', '-n', '1', '-c=3'],
    ['write-zeroes', '/dev/nvme9', '--s', '1'],
    ['write-zeroes', '/dev/nvme9', '--bogus'],
    ['write-zeroes', '/dev/nvme9', '-z'],
    ['write-zeroes', '/dev/nvme9', '-n', '1', '-s', '1x'],
    ['write-zeroes', '/dev/nvme9', '-c', '65535'],
    ['id-ctrl', '/dev/nvme9'],
    ['id-ctrl', '/dev/nvme9', '-o', 'json'],
    ['id-ctrl'],
    ['id-ctrl', '/dev/nvme9', '-o'],
    ['id-ctrl', '/dev/nvme9', '--output-format'],
    ['id-ctrl', '/dev/nvme9', '--vendor-specific=1'],
    ['id-ctrl', '/dev/nvme9', '-x'],
    ['id-ctrl', '/dev/nvme9', '-vx'],
    ['id-ctrl', '/dev/nvme9', '--h'],
    ['id-ctrl', '--help'],
    ['id-ctrl', '/etc/passwd'],
    ['sanitize', '/dev/nvme9', '-a', 'foo'],
    ['sanitize', '/dev/nvme9', '-a', 'start'],
    ['sanitize', '/dev/nvme9', '-a', '256'],
    ['sanitize', '/dev/nvme9', '-a', 'start-crypto-erase'],
    ['sanitize-log', '/dev/nvme9', '-o', 'json'],
    ['delete-ns', '/dev/nvme9', '-n', 'abc'],
    ['create-ns', '/dev/nvme9', '-s', '1x'],
    ['format', '/dev/nvme9', '-n', '1', '-fo'],
    ['list', '-x'],
    ['list', '-o', 'xml'],
    ['list-ns', '/dev/nvme9'],
    ['id-ns', '/dev/nvme9', '-n', '1'],
    ['attach-ns', '/dev/nvme9'],
    ['ns-rescan', '--help'],
    ['bogus'],
    ['id'],
    ['help'],
    ['version'],
  ];
  it.each(cases)('nvme %s ...', async (...args: string[]) => {
    const r = real(args);
    const s = await sim(args);
    expect(s).toEqual({ stdout: r.stdout, stderr: r.stderr, code: r.code });
  });
});
