import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  loadOrCreateSigningKey,
  retiredPublicKeys,
  rotateSigningKey,
  SIGNING_KEY_FILE,
} from './signing-key.js';

describe("the agent's signing key", () => {
  const dirs: string[] = [];
  const dir = () => {
    const d = mkdtempSync(join(tmpdir(), 'berth-key-'));
    dirs.push(d);
    return d;
  };
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('is made once, mode 0600, and read back the same', () => {
    const d = dir();
    const made = loadOrCreateSigningKey(d);
    expect(made.created).toBe(true);
    expect(statSync(join(d, SIGNING_KEY_FILE)).mode & 0o777).toBe(0o600);
    const again = loadOrCreateSigningKey(d);
    expect(again.created).toBe(false);
    expect(again.kid).toBe(made.kid);
    expect(again.publicJwk).toEqual(made.publicJwk);
  });

  it('refuses a key file others can read, saying why', () => {
    const d = dir();
    loadOrCreateSigningKey(d);
    chmodSync(join(d, SIGNING_KEY_FILE), 0o644);
    expect(() => loadOrCreateSigningKey(d)).toThrow(/readable by others \(mode 644\).*chmod 600/);
  });

  it('rotation makes a new key and keeps the old one beside it, which the agent then reports as retired', () => {
    const d = dir();
    const first = loadOrCreateSigningKey(d);
    const { key, retired } = rotateSigningKey(d);
    expect(retired?.kid).toBe(first.kid);
    expect(key.kid).not.toBe(first.kid);
    expect(readdirSync(d).sort()).toEqual([`signing-key.${first.kid}.pem`, SIGNING_KEY_FILE].sort());
    expect(loadOrCreateSigningKey(d).kid).toBe(key.kid);
    expect(retiredPublicKeys(d)).toEqual([first.publicJwk]);
  });
});
