/**
 * `berth cleanup certificate|verify`: erasure certificates
 * (docs/erasure-certificates.md). `certificate` fetches them from the
 * scheduler (of a device, a cleanup job or an instance) and prints or saves
 * them; `verify` checks one offline, against a key file (`berth host keys
 * --save`) or the scheduler's published keys, with its chain when the
 * previous certificate is given.
 */
import { readFile, writeFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { CertificateError, decodeCertificate } from '../../erasure/certificate.js';
import { chainViews, linkViewLines } from '../../erasure/chain.js';
import { parseKeySet, type Verification, type VerifyOptions, verifyOffline } from '../../erasure/verify.js';
import type { ErasureCertificate } from '../../gen/berth/scheduler/v1/certificate.js';
import { UsageError } from '../usage-error.js';
import { EXIT_CODE } from './command-errors.js';
import { clientOptions, connectionFlags, connectionOptions, withClient } from './connection.js';
import { render, renderRecord, renderTable } from './output.js';
import { resolveDeviceRef } from './references.js';

interface CertificateFlags {
  device?: string;
  job?: string;
  instance?: string;
  save?: string;
}

const certView = (c: ErasureCertificate) => ({
  hash: c.hash,
  media_key: c.mediaKey,
  seq: Number(c.seq),
  host: c.host,
  key_id: c.keyId,
  job_id: c.jobId,
  device_uuid: c.deviceUuid,
  instance_uuid: c.instanceUuid,
  arq_uuid: c.arqUuid,
  issued_at: c.issuedAt?.toISOString() ?? '',
  jws: c.jws,
});

export function registerCleanupCommands(program: Command): void {
  const cleanup = program
    .command('cleanup')
    .description('erasure certificates of cleanups: fetch and verify');

  clientOptions(
    cleanup
      .command('certificate')
      .description('print (or save) the erasure certificates of a device, a cleanup job or an instance')
      .option('--device <device>', 'a device: uuid (or prefix), host/address')
      .option('--job <id>', 'a cleanup job id')
      .option('--instance <uuid>', 'an instance: the certificates of its tenant data')
      .option('--save <file>', 'write the newest certificate (compact JWS) to this file'),
  ).action(
    withClient(async (client, format, flags: CertificateFlags) => {
      const given = [flags.device, flags.job, flags.instance].filter((v) => v !== undefined);
      if (given.length !== 1) throw new UsageError('give one of --device, --job, --instance');
      const of = flags.device
        ? { $case: 'device' as const, value: await resolveDeviceRef(client, flags.device) }
        : flags.job
          ? { $case: 'jobId' as const, value: flags.job }
          : { $case: 'instanceUuid' as const, value: flags.instance! };
      const { certificates } = await client.certificates.listErasureCertificates({ of });
      // Each link's handover and gap, as a verifier reading the chain sees them (decision 63).
      const views = chainViews(
        certificates.map((c) => ({ hash: c.hash, claims: decodeCertificate(c.jws).claims })),
      );
      const rows = certificates.map((c, i) => ({
        ...certView(c),
        chain: linkViewLines(views[i]!).join('; '),
      }));
      if (flags.save) {
        const newest = certificates.at(-1);
        if (!newest) throw new UsageError('no certificate to save');
        await writeFile(flags.save, `${newest.jws}\n`);
        console.error(`saved ${newest.hash} to ${flags.save}`);
      }
      console.log(
        render(format, rows, (wide) =>
          rows.length === 0
            ? 'no certificates'
            : wide
              ? rows.map((r) => renderRecord(r)).join('\n\n')
              : renderTable(rows, [
                  { header: 'media', get: (r) => r.media_key, shrink: true },
                  { header: 'seq', get: (r) => r.seq },
                  { header: 'host', get: (r) => r.host },
                  { header: 'job', get: (r) => r.job_id },
                  { header: 'instance', get: (r) => r.instance_uuid },
                  { header: 'issued', get: (r) => r.issued_at },
                  { header: 'chain', get: (r) => r.chain },
                  { header: 'hash', get: (r) => r.hash, shrink: true },
                ]),
        ),
      );
    }),
  );

  const verify = cleanup
    .command('verify')
    .description(
      "verify an erasure certificate offline: its signature against a key file (or the scheduler's published keys), that the key is the claimed host's, its chain (--previous), its identity",
    )
    .argument('<file>', 'the certificate (compact JWS)')
    .option('--keys <file>', 'trusted public keys: a JWK or a JWK Set (berth host keys --save FILE)')
    .option('--previous <file>', 'the previous certificate of the same media: the chain link is checked')
    .option('--media-key <key>', 'the media it must name')
    .option('--host <name>', 'the host it must name')
    .option(
      '--from-scheduler',
      "take the keys from the scheduler's published list (ListAgentKeys) instead of --keys",
    )
    .option(
      '--allow-keys-without-host',
      'trust a key the key file names no host for (a bare JWK, an old key set) for the host the certificate claims',
    )
    .option('-o, --output <format>', 'table, json or yaml', 'table');
  connectionOptions(verify).action(
    async (file: string, flags: Record<string, string | boolean | undefined>, cmd: Command) => {
      try {
        const jws = (await readFile(file, 'utf8')).trim();
        const previous =
          typeof flags['previous'] === 'string'
            ? (await readFile(flags['previous'], 'utf8')).trim()
            : undefined;
        const opts: VerifyOptions = {
          ...(previous !== undefined ? { previous } : {}),
          ...(typeof flags['mediaKey'] === 'string' ? { mediaKey: flags['mediaKey'] } : {}),
          ...(typeof flags['host'] === 'string' ? { host: flags['host'] } : {}),
          allowKeysWithoutHost: flags['allowKeysWithoutHost'] === true,
        };
        let v: Verification;
        if (flags['fromScheduler']) {
          v = await verifyWithScheduler(cmd, jws, opts);
        } else if (typeof flags['keys'] === 'string') {
          v = verifyOffline(jws, parseKeySet(await readFile(flags['keys'], 'utf8')), opts);
        } else {
          throw new UsageError('give --keys FILE or --from-scheduler');
        }
        const c = v.certificate.claims;
        const out = {
          valid: true,
          checks: v.checks,
          media_key: c.media.key,
          host: c.host,
          address: c.address,
          tenant: c.tenant,
          action: c.action,
          nist_800_88: c.nist_800_88?.category ?? null,
          started_at: c.started_at,
          ended_at: c.ended_at,
          seq: c.seq,
          prev: c.prev,
          handover: v.handover,
          gap: v.gap,
        };
        const format = String(flags['output'] ?? 'table');
        console.log(
          render(format === 'json' || format === 'yaml' ? format : 'table', out, () =>
            [
              `valid: ${file}`,
              ...v.checks.map((l) => `  ${l}`),
              `  erased: ${c.action} (${c.nist_800_88?.category ?? 'no NIST 800-88 category'}), ${c.started_at} – ${c.ended_at}`,
              `  tenant: ${c.tenant ? `instance ${c.tenant.instance_uuid}, ARQ ${c.tenant.arq_uuid}${c.tenant.project_id ? `, project ${c.tenant.project_id}` : ''}` : 'none recorded'}`,
            ].join('\n'),
          ),
        );
      } catch (err) {
        if (err instanceof CertificateError) {
          console.error(`berth: certificate ${file} ${err.message}`);
          process.exitCode = EXIT_CODE.failed;
          return;
        }
        throw err;
      }
    },
  );
}

/** Verifies against the scheduler's published keys of every host (ListAgentKeys), each bound to its host. */
async function verifyWithScheduler(cmd: Command, jws: string, opts: VerifyOptions): Promise<Verification> {
  const { SchedulerClient } = await import('../sdk.js');
  const client = await SchedulerClient.fromClientConfig(connectionFlags(cmd.opts()));
  try {
    return await client.verifyErasureCertificate(jws, opts);
  } finally {
    client.close();
  }
}
