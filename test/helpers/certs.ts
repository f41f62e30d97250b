/**
 * Certificates made at run time with openssl, for the TLS tests: a CA, and
 * leaf certificates (EC P-256, serverAuth + clientAuth) issued by it for a
 * common name and the subject alternative names a test needs.
 */
import { execFileSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface Leaf {
  cert: string;
  key: string;
  /** The CA that issued it. */
  ca: string;
}

const ssl = (dir: string, args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });

export async function makeCa(dir: string, name: string) {
  ssl(dir, ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', `${name}.key`]);
  ssl(dir, [
    'req',
    '-x509',
    '-new',
    '-key',
    `${name}.key`,
    '-subj',
    `/CN=${name}`,
    '-days',
    '2',
    '-out',
    `${name}.crt`,
  ]);
  return {
    ca: join(dir, `${name}.crt`),
    /** A leaf for `cn`, valid for `sans` (default: IP 127.0.0.1 and localhost). */
    async leaf(cn: string, sans = ['IP:127.0.0.1', 'DNS:localhost']): Promise<Leaf> {
      const base = `${name}-${cn}`;
      ssl(dir, ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', `${base}.key`]);
      ssl(dir, ['req', '-new', '-key', `${base}.key`, '-subj', `/CN=${cn}`, '-out', `${base}.csr`]);
      await writeFile(
        join(dir, `${base}.ext`),
        `subjectAltName=${sans.join(',')}\nextendedKeyUsage=serverAuth,clientAuth\n`,
      );
      ssl(dir, [
        'x509',
        '-req',
        '-in',
        `${base}.csr`,
        '-CA',
        `${name}.crt`,
        '-CAkey',
        `${name}.key`,
        '-CAcreateserial',
        '-days',
        '2',
        '-extfile',
        `${base}.ext`,
        '-out',
        `${base}.crt`,
      ]);
      return { cert: join(dir, `${base}.crt`), key: join(dir, `${base}.key`), ca: join(dir, `${name}.crt`) };
    },
  };
}
