/**
 * The agent's own Ed25519 key, which signs its erasure certificates
 * (src/erasure/certificate.ts). Made at the agent's first start in its state
 * dir (`signing-key.pem`, PKCS#8, mode 0600, written to a temporary file and
 * renamed), read at every start after. A key file that others may read is
 * refused: whoever reads it can sign certificates for this host. `berth agent
 * signing-key --rotate` makes a new one and keeps the old file beside it
 * (`signing-key.<kid>.pem`), so the operator can pin the new key with
 * `berth host rotate-key` (docs/erasure-certificates.md).
 */
import { createPrivateKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  readdirSync,
  readFileSync,
  renameSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { jwkThumbprint, type PublicJwk, publicJwkOf } from '../../erasure/certificate.js';

export const SIGNING_KEY_FILE = 'signing-key.pem';

export interface SigningKey {
  privateKey: KeyObject;
  publicJwk: PublicJwk;
  /** RFC 7638 thumbprint of the public key. */
  kid: string;
  path: string;
}

function write(path: string, key: KeyObject): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, key.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'w' });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}

function fromFile(path: string): SigningKey {
  const mode = statSync(path).mode & 0o777;
  if (mode & 0o077) {
    throw new Error(
      `${path} is readable by others (mode ${mode.toString(8)}): whoever reads it can sign erasure certificates for this host; chmod 600 it`,
    );
  }
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(readFileSync(path));
  } catch (err) {
    throw new Error(`${path} is not a private key: ${(err as Error).message}`);
  }
  if (privateKey.asymmetricKeyType !== 'ed25519') {
    throw new Error(`${path} holds a ${privateKey.asymmetricKeyType} key, not Ed25519`);
  }
  const publicJwk = publicJwkOf(privateKey);
  return { privateKey, publicJwk, kid: jwkThumbprint(publicJwk), path };
}

/** The agent's key in `stateDir`, made there if it has none. */
export function loadOrCreateSigningKey(stateDir: string): SigningKey & { created: boolean } {
  const path = join(stateDir, SIGNING_KEY_FILE);
  if (existsSync(path)) return { ...fromFile(path), created: false };
  write(path, generateKeyPairSync('ed25519').privateKey);
  return { ...fromFile(path), created: true };
}

/** The public keys of the retired key files in `stateDir` (signing-key.<kid>.pem), oldest name first. */
export function retiredPublicKeys(stateDir: string): PublicJwk[] {
  const out: PublicJwk[] = [];
  for (const f of readdirSync(stateDir).sort()) {
    if (!/^signing-key\.[A-Za-z0-9_-]{43}\.pem$/.test(f)) continue;
    try {
      out.push(publicJwkOf(createPrivateKey(readFileSync(join(stateDir, f)))));
    } catch {
      // not a key: skipped (the operator's file)
    }
  }
  return out;
}

/** Replaces the key in `stateDir` with a new one; the old file stays as signing-key.<kid>.pem. */
export function rotateSigningKey(stateDir: string): { key: SigningKey; retired: SigningKey | null } {
  const path = join(stateDir, SIGNING_KEY_FILE);
  let retired: SigningKey | null = null;
  if (existsSync(path)) {
    retired = fromFile(path);
    renameSync(path, join(stateDir, `signing-key.${retired.kid}.pem`));
  }
  write(path, generateKeyPairSync('ed25519').privateKey);
  return { key: fromFile(path), retired };
}
