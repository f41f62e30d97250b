/**
 * The prerequisite checks: each real tool a test needs is probed by using it,
 * a missing one skips with a line naming the package, and on CI
 * (BERTH_REQUIRE_TOOLS=1) it fails instead.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { available, type Prerequisite, pythonGrpc } from './prerequisites.js';

const missing: Prerequisite = {
  name: 'frobnicate',
  missing: '/usr/bin/frobnicate not found',
  packages: ['frob-utils'],
};

describe('available()', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
  });

  it('skips with one line naming what is missing and the package to install', () => {
    vi.stubEnv('BERTH_REQUIRE_TOOLS', '');
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    expect(available(missing, 'the frobnication test')).toBe(false);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]![0]).toBe(
      'skipped: the frobnication test: needs frobnicate (apt-get install frob-utils): /usr/bin/frobnicate not found',
    );
  });

  it('fails instead when BERTH_REQUIRE_TOOLS=1 (.ci/run), so a forgotten package is a red run', () => {
    vi.stubEnv('BERTH_REQUIRE_TOOLS', '1');
    expect(() => available(missing, 'the frobnication test')).toThrow(
      /needs frobnicate \(apt-get install frob-utils\).*BERTH_REQUIRE_TOOLS=1/,
    );
  });

  it('only skips for a property of the machine (no package brings it), even on CI', () => {
    vi.stubEnv('BERTH_REQUIRE_TOOLS', '1');
    vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    expect(available({ name: 'root', missing: 'not root', packages: [] }, 'a loop-device test')).toBe(false);
  });

  it('lists every package the Python client test needs, the well-known protos included', () => {
    // protobuf-compiler alone does not bring google/protobuf/*.proto: the
    // probe compiles a file importing timestamp.proto, as the test does.
    expect(pythonGrpc().packages).toContain('libprotobuf-dev');
  });
});
