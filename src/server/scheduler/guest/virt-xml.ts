/**
 * libvirt's own schema as a test oracle: wraps hostdev XML in a minimal domain
 * and runs `virt-xml-validate FILE domain`. Used by the tests only, kept out of
 * the *.test.ts files so the example-based and the property tests share it.
 */

import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const VIRT_XML_VALIDATE = '/usr/bin/virt-xml-validate';

/** The smallest domain libvirt's schema accepts, with `devices` inside <devices>. */
export const wrapInDomain = (devices: string): string =>
  `<domain type='kvm'><name>t</name><memory>1048576</memory><os><type arch='x86_64'>hvm</type></os><devices>\n${devices}\n</devices></domain>\n`;

export interface ValidationResult {
  ok: boolean;
  output: string;
}

/**
 * Validate each domain document; one virt-xml-validate process per document
 * (the tool takes one file), run sequentially.
 */
export function validateDomains(domains: readonly string[]): ValidationResult[] {
  const dir = mkdtempSync(join(tmpdir(), 'berth-virt-xml-'));
  try {
    return domains.map((xml, i) => {
      const file = join(dir, `d${i}.xml`);
      writeFileSync(file, xml);
      try {
        const out = execFileSync(VIRT_XML_VALIDATE, [file, 'domain'], { encoding: 'utf8', stdio: 'pipe' });
        return { ok: true, output: out };
      } catch (e) {
        const err = e as { stdout?: string; stderr?: string };
        return { ok: false, output: `${err.stdout ?? ''}${err.stderr ?? ''}` };
      }
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
