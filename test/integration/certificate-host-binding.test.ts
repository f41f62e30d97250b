/**
 * Offline verification binds a certificate's key to its host (issue 38,
 * break 2; decision 66; docs/erasure-certificates.md). A real scheduler and
 * two agents on simulated hosts, on loopback; hosta cleans a drive twice, so
 * its media has a genuine chain of two. The forgery is what a compromised
 * host B could make: B's own agent key (read from B's state directory) signs
 * hosta's link 2 — `host: hosta`, continuing hosta's media chain. Its
 * signature is valid; only the binding of key to host tells it apart.
 *
 * Every verifier Berth ships or documents must refuse it and accept the
 * genuine link: `berth cleanup verify` with `--keys` (with and without
 * `--host`) and `--from-scheduler`, the SDK's verifiers, the Python example,
 * and the openssl recipe of the docs run with dash exactly as printed. The
 * Python example also answers malformed input with one INVALID: line.
 */
import { execFile } from 'node:child_process';
import { createPrivateKey } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CertificateError, parseKeySet, verifyErasureCertificate } from '../../src/client/sdk.js';
import {
  decodeCertificate,
  jwkThumbprint,
  publicJwkOf,
  signCertificate,
} from '../../src/erasure/certificate.js';
import { SIGNING_KEY_FILE } from '../../src/server/agent/signing-key.js';
import { demoHostDefinition } from '../../src/sim/host.js';
import { berth, cliEnv } from '../helpers/berth-cli.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import {
  createAndBind,
  createNvmeProfile,
  settledDevice,
  stateName,
  uuidRef,
} from '../helpers/invariants.js';
import { available, PYTHON, pythonCryptography, shOpensslRecipe } from '../helpers/prerequisites.js';

const A = 'hosta';
const B = 'hostb';

/** Runs a program to completion; never rejects (the exit status is the result). */
function run(
  cmd: string,
  args: string[],
  cwd: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd, timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

describe("offline verification binds a certificate's key to its host", () => {
  let c: Cluster;
  let env: NodeJS.ProcessEnv;
  const file = (name: string) => join(c.root, name);
  /** hosta's media chain: link 1 (prev.jws) and link 2 (genuine.jws); the forgery of link 2 by B's key. */
  let prev = '';
  let genuine = '';
  let forged = '';
  let kidA = '';
  let kidB = '';
  /** What every verifier says of the forgery (the Python and sh wording is the same). */
  const refusal = () =>
    `claims host ${A}, but it is signed with key ${kidB}, which is host ${B}'s key, not host ${A}'s`;

  /** keys.json as a Berth that did not record hosts would have saved it. */
  const withoutHosts = () => {
    const set = JSON.parse(readFileSync(file('keys.json'), 'utf8')) as { keys: Record<string, string>[] };
    return JSON.stringify({ keys: set.keys.map(({ host: _, ...k }) => k) });
  };

  beforeAll(async () => {
    c = await startCluster([demoHostDefinition(A, 0x3b), demoHostDefinition(B, 0x5b)]);
    await c.waitForDevices(A, 9);
    await c.waitForDevices(B, 9);
    env = cliEnv(file('cli-config.yaml'), { BERTH_ENDPOINT: c.scheduler.address });
    await createNvmeProfile(c.client, 'nvme2');
    let deviceUuid = '';
    for (const instance of ['vm-a-1', 'vm-a-2']) {
      const bound = await createAndBind(c.client, 'pick-nvme2', instance, A);
      deviceUuid = bound.deviceUuid;
      const device = (await c.client.devices.getDevice({ device: uuidRef(deviceUuid) })).device!;
      await c.client.arqs.deleteAcceleratorRequests({ uuids: [bound.uuid], instanceUuid: '' });
      const d = await settledDevice(c.client, A, device.address, 60_000);
      expect(stateName(d.deviceState), d.errorReason).toBe('DEVICE_STATE_AVAILABLE');
    }
    const chain = (
      await c.client.certificates.listErasureCertificates({
        of: { $case: 'device', value: uuidRef(deviceUuid) },
      })
    ).certificates;
    expect(chain.map((x) => Number(x.seq))).toEqual([1, 2]);
    prev = chain[0]!.jws;
    genuine = chain[1]!.jws;
    kidA = decodeCertificate(genuine).header.kid;
    // Host B's key, as a compromised host B holds it.
    const keyB = createPrivateKey(readFileSync(join(c.host(B).agent!.config.stateDir, SIGNING_KEY_FILE)));
    kidB = jwkThumbprint(publicJwkOf(keyB));
    const claims = structuredClone(decodeCertificate(genuine).claims);
    claims.kid = kidB;
    forged = signCertificate(claims, keyB, kidB);
    expect(decodeCertificate(forged).claims).toMatchObject({ host: A, seq: 2, prev: chain[0]!.hash });
    writeFileSync(file('prev.jws'), `${prev}\n`);
    writeFileSync(file('genuine.jws'), `${genuine}\n`);
    writeFileSync(file('forged.jws'), `${forged}\n`);
    const saved = await berth(['host', 'keys', '--save', file('keys.json')], env);
    expect(saved.code, saved.stderr).toBe(0);
  }, 120_000);

  afterAll(async () => {
    await c?.stop();
  });

  it('berth host keys --save names each key’s host; the scheduler published B’s key as B’s', () => {
    const set = JSON.parse(readFileSync(file('keys.json'), 'utf8')) as { keys: Record<string, string>[] };
    expect(set.keys.map((k) => [k['host'], k['kid'], k['kty'], k['crv']])).toEqual(
      expect.arrayContaining([
        [A, kidA, 'OKP', 'Ed25519'],
        [B, kidB, 'OKP', 'Ed25519'],
      ]),
    );
    expect(kidA).not.toBe(kidB);
  });

  it('berth cleanup verify: --keys and --from-scheduler, with and without --host, refuse the forgery, naming the key and both hosts', async () => {
    const ways = [
      ['--keys', file('keys.json')],
      ['--keys', file('keys.json'), '--host', A],
      ['--from-scheduler'],
      ['--from-scheduler', '--host', A],
    ];
    for (const way of ways) {
      const ok = await berth(
        ['cleanup', 'verify', file('genuine.jws'), ...way, '--previous', file('prev.jws')],
        env,
      );
      expect(ok.code, `${way.join(' ')}: ${ok.stderr}`).toBe(0);
      expect(ok.stdout).toContain(`key: ${kidA} is host ${A}'s key`);
      const bad = await berth(
        ['cleanup', 'verify', file('forged.jws'), ...way, '--previous', file('prev.jws')],
        env,
      );
      expect(bad.code, way.join(' ')).toBe(1);
      expect(bad.stderr).toContain(refusal());
    }
  }, 120_000);

  it('a key set without hosts (an old file) is refused until saved again, or trusted for any host explicitly', async () => {
    writeFileSync(file('old-keys.json'), withoutHosts());
    for (const cert of ['genuine.jws', 'forged.jws']) {
      const r = await berth(['cleanup', 'verify', file(cert), '--keys', file('old-keys.json')], env);
      expect(r.code, cert).toBe(1);
      expect(r.stderr).toContain('which the key set names no host for');
      expect(r.stderr).toContain('berth host keys --save FILE');
    }
    const trusted = await berth(
      [
        'cleanup',
        'verify',
        file('genuine.jws'),
        '--keys',
        file('old-keys.json'),
        '--allow-keys-without-host',
      ],
      env,
    );
    expect(trusted.code, trusted.stderr).toBe(0);
    expect(trusted.stdout).toContain('--allow-keys-without-host');
  }, 60_000);

  it("the SDK's verifiers, offline and against the scheduler's keys, refuse the forgery", async () => {
    const keys = parseKeySet(readFileSync(file('keys.json'), 'utf8'));
    expect(verifyErasureCertificate(genuine, keys, { previous: prev, host: A }).certificate.claims.seq).toBe(
      2,
    );
    expect(() => verifyErasureCertificate(forged, keys, { previous: prev })).toThrow(CertificateError);
    expect(() => verifyErasureCertificate(forged, keys, { previous: prev, host: A })).toThrow(refusal());
    expect((await c.client.verifyErasureCertificate(genuine, { previous: prev })).checks).toContain(
      `key: ${kidA} is host ${A}'s key`,
    );
    await expect(c.client.verifyErasureCertificate(forged, { previous: prev })).rejects.toThrow(refusal());
  });

  it('examples/verify-erasure-certificate.py refuses the forgery and answers malformed input with one INVALID: line', async (ctx) => {
    if (!available(pythonCryptography(), 'the Python verification example')) return ctx.skip();
    const script = join(__dirname, '../../examples/verify-erasure-certificate.py');
    const py = (...args: string[]) => run(PYTHON, [script, ...args], c.root);
    const ok = await py('genuine.jws', 'keys.json', 'prev.jws');
    expect(ok.code, ok.stderr).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ valid: true, host: A, key: kidA, seq: 2 });
    const bad = await py('forged.jws', 'keys.json', 'prev.jws');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe(`INVALID: ${refusal()}\n`);
    // A key set without hosts: refused, unless trusted for any host explicitly.
    writeFileSync(file('py-old-keys.json'), withoutHosts());
    const old = await py('genuine.jws', 'py-old-keys.json');
    expect(old.code).toBe(1);
    expect(old.stderr).toMatch(
      /^INVALID: signed with key .*, which the key set names no host for.*berth host keys --save/,
    );
    const trusted = await py('--allow-keys-without-host', 'genuine.jws', 'py-old-keys.json');
    expect(trusted.code, trusted.stderr).toBe(0);
    const [h, p, s] = genuine.split('.') as [string, string, string];
    const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
    const claims = decodeCertificate(genuine).claims as unknown as Record<string, unknown>;
    const set = JSON.parse(readFileSync(file('keys.json'), 'utf8')) as { keys: Record<string, unknown>[] };
    const malformed: [string, string, string, RegExp][] = [
      ['two parts', `${h}.${p}`, 'keys.json', /not a JWS in compact form/],
      ['four parts', `${genuine}.${s}`, 'keys.json', /not a JWS in compact form/],
      ['not base64url', `${h}.${p}!.${s}`, 'keys.json', /payload is not base64url/],
      [
        'a payload that is not JSON',
        `${h}.${Buffer.from('{"v":1,').toString('base64url')}.${s}`,
        'keys.json',
        /not JSON/,
      ],
      ['a payload that is a list', `${h}.${b64([1, 2])}.${s}`, 'keys.json', /not a JSON object/],
      [
        'no host claim',
        `${h}.${b64({ ...claims, host: undefined })}.${s}`,
        'keys.json',
        /no valid host claim/,
      ],
      ['no media', `${h}.${b64({ ...claims, media: 'x' })}.${s}`, 'keys.json', /no valid media claim/],
      ['seq not a number', `${h}.${b64({ ...claims, seq: '2' })}.${s}`, 'keys.json', /no valid seq claim/],
      ['no kid in the header', `${b64({ alg: 'EdDSA' })}.${p}.${s}`, 'keys.json', /names no key \(kid\)/],
      ['binary bytes', '\u00ff\u00fe\u0000', 'keys.json', /not a JWS|cannot read/],
      ['a key file that is not JSON', genuine, 'keys.txt', /key file .* is not JSON/],
      ['a key set whose keys is not a list', genuine, 'keys-object.json', /neither a JWK nor a JWK Set/],
      ['a key whose x is short', genuine, 'keys-short.json', /key \d+ of the key file has no 32-byte x/],
      ['a key whose host is a number', genuine, 'keys-host.json', /key \d+ of the key file has host 7/],
      ['a key file that does not exist', genuine, 'nothing.json', /cannot read the key file/],
    ];
    writeFileSync(file('keys.txt'), 'keys: none');
    writeFileSync(file('keys-object.json'), JSON.stringify({ keys: { a: 1 } }));
    writeFileSync(
      file('keys-short.json'),
      JSON.stringify({ keys: set.keys.map((k) => ({ ...k, x: 'abc' })) }),
    );
    writeFileSync(file('keys-host.json'), JSON.stringify({ keys: set.keys.map((k) => ({ ...k, host: 7 })) }));
    for (const [what, cert, keys, why] of malformed) {
      writeFileSync(file('malformed.jws'), cert, 'latin1');
      const r = await py('malformed.jws', keys);
      expect(r.code, `${what}: ${r.stderr}`).toBe(1);
      expect(r.stderr, what).toMatch(/^INVALID: [^\n]+\n$/);
      expect(r.stderr, what).toMatch(why);
      expect(r.stdout, what).toBe('');
    }
    // A malformed previous certificate is named too.
    writeFileSync(file('malformed.jws'), 'a.b');
    const r = await py('genuine.jws', 'keys.json', 'malformed.jws');
    expect(r.stderr).toBe(
      'INVALID: the previous certificate is not a JWS in compact form (three base64url parts)\n',
    );
  }, 60_000);

  it('the openssl recipe of docs/erasure-certificates.md, run with dash as printed, accepts the genuine link and refuses the forgery', async (ctx) => {
    if (!available(shOpensslRecipe(), 'the openssl recipe')) return ctx.skip();
    const doc = readFileSync(join(__dirname, '../../docs/erasure-certificates.md'), 'utf8');
    const section = doc.slice(doc.indexOf('### Without Berth: openssl'));
    const recipe = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
    expect(recipe, 'the openssl section has a sh block').toBeDefined();
    writeFileSync(file('verify.sh'), recipe!);
    const sh = (...args: string[]) => run('dash', ['verify.sh', ...args], c.root);
    const ok = await sh('genuine.jws', 'keys.json', 'prev.jws');
    expect(ok.code, ok.stderr).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ host: A, kid: kidA, seq: 2 });
    const bad = await sh('forged.jws', 'keys.json', 'prev.jws');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe(`INVALID: ${refusal()}\n`);
    // The recipe's other checks fail too: an edited payload, a broken chain, an unknown key.
    const [h, p, s] = genuine.split('.') as [string, string, string];
    const edited = JSON.parse(Buffer.from(p, 'base64url').toString()) as Record<string, unknown>;
    edited['action'] = 'shred';
    writeFileSync(
      file('edited.jws'),
      `${h}.${Buffer.from(JSON.stringify(edited)).toString('base64url')}.${s}\n`,
    );
    const e = await sh('edited.jws', 'keys.json');
    expect(e.code).toBe(1);
    expect(e.stderr).toBe(`INVALID: the signature does not verify with key ${kidA}\n`);
    const wrongWay = await sh('prev.jws', 'keys.json', 'genuine.jws');
    expect(wrongWay.code).toBe(1);
    expect(wrongWay.stderr).toContain('chain broken');
    writeFileSync(file('sh-old-keys.json'), withoutHosts());
    const old = await sh('genuine.jws', 'sh-old-keys.json');
    expect(old.code).toBe(1);
    expect(old.stderr).toContain(`which is host (none named: save the key set again)'s key, not host ${A}'s`);
    writeFileSync(file('only-b.json'), JSON.stringify({ keys: [] }));
    const unknown = await sh('genuine.jws', 'only-b.json');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toBe(`INVALID: signed with key ${kidA}, which is not in only-b.json\n`);
  }, 60_000);
});
