/**
 * `berth config set|show`: the client configuration for a scheduler that is
 * not a `berth up` (which writes its own): the endpoint, the token and the
 * TLS files, checked against the scheduler before they are written (as
 * `kubectl config set-cluster` + a first call, in one step).
 */
import { isAbsolute, resolve } from 'node:path';
import type { Command } from 'commander';
import {
  type ClientConfigFile,
  type ClientFlagValues,
  clientConfigPath,
  parseEndpoint,
  readClientConfig,
  resolveClient,
  writeClientConfig,
} from '../client-config.js';
import { connect, connectionFlags, connectionOptions, OUTPUT_HELP, reportClientError } from './connection.js';
import { parseFormat, render, renderRecord } from './output.js';
import { listAllHosts } from './references.js';

interface SetFlags extends ClientFlagValues {
  check: boolean;
  stateDir?: string;
}

/** A token as `show` prints it: enough to tell two apart, not enough to use. */
const redact = (t: string | undefined) => (t ? `${t.slice(0, 10)}… (${t.length} characters)` : '');

export function registerConfigCommands(program: Command): void {
  const config = program
    .command('config')
    .description('the client configuration: which scheduler the CLI calls, with which token and TLS files');

  connectionOptions(
    config
      .command('set')
      .description(
        'write the given settings into the client configuration ($BERTH_CONFIG, default ~/.config/berth/config.yaml), after checking that the scheduler answers with them; other settings stay',
      ),
  )
    .option('--state-dir <dir>', "a berth up's state directory (the demo injects faults through it)")
    .option('--no-check', 'write without calling the scheduler first')
    .action(async (o: SetFlags) => {
      const path = clientConfigPath();
      const current = await readClientConfig(path);
      const abs = (p: string) => (isAbsolute(p) ? p : resolve(p));
      const next: ClientConfigFile = { ...current };
      if (o.endpoint !== undefined) {
        parseEndpoint(o.endpoint, '--endpoint');
        next.endpoint = o.endpoint.trim();
      }
      if (o.token !== undefined) next.token = o.token;
      if (o.stateDir !== undefined) next.state_dir = abs(o.stateDir);
      const tls = { ...(current.tls ?? {}) };
      if (o.tlsCa !== undefined) tls.ca = abs(o.tlsCa);
      if (o.tlsCert !== undefined) tls.cert = abs(o.tlsCert);
      if (o.tlsKey !== undefined) tls.key = abs(o.tlsKey);
      if (o.tlsServerName !== undefined) tls.server_name = o.tlsServerName;
      for (const k of Object.keys(tls) as (keyof typeof tls)[]) if (tls[k] === '') delete tls[k];
      if (Object.keys(tls).length > 0) next.tls = tls;
      else delete next.tls;
      if (o.check) {
        // Exactly what the next command will use: the new file's settings, nothing from flags.
        const flags = {
          endpoint: next.endpoint,
          token: next.token,
          tlsCa: next.tls?.ca,
          tlsCert: next.tls?.cert,
          tlsKey: next.tls?.key,
          tlsServerName: next.tls?.server_name,
        };
        const { client, resolved, tls: pems } = await connect(flags, { retries: 1, timeoutMs: 10_000 });
        try {
          const hosts = (await listAllHosts(client)).length;
          console.log(
            `${resolved.endpoint}: a Berth scheduler answers (${resolved.tls ? 'TLS' : 'plaintext'}, ${hosts} host${hosts === 1 ? '' : 's'})`,
          );
        } catch (err) {
          process.exitCode = await reportClientError(err, { ...resolved, endpointSource: 'flag' }, pems);
          console.error(`berth: ${path} is unchanged (--no-check writes it anyway)`);
          return;
        } finally {
          client.close();
        }
      }
      const written = await writeClientConfig(next, path, 'berth config set');
      console.log(`client configuration written to ${written}`);
    });

  connectionOptions(
    config
      .command('show')
      .description('the settings the CLI would use, each with where it comes from (the token shortened)')
      .option('-o, --output <format>', OUTPUT_HELP, 'table'),
  ).action(async (o: ClientFlagValues & { output: string }) => {
    const format = parseFormat(o.output);
    try {
      const r = await resolveClient(connectionFlags(o));
      const view = {
        config_file: r.configPath,
        endpoint: r.endpoint,
        endpoint_from: r.endpointName,
        token: redact(r.token),
        token_from: r.tokenSource,
        tls: r.tls
          ? {
              ca: r.tls.ca ?? '',
              cert: r.tls.cert ?? '',
              key: r.tls.key ?? '',
              server_name: r.tls.serverName ?? '',
              from: r.tls.from,
            }
          : null,
        state_dir: r.stateDir ?? '',
      };
      console.log(
        render(format, view, () =>
          renderRecord({
            ...view,
            tls: view.tls
              ? `on (${view.tls.from.join(', ')})${view.tls.ca ? ` ca=${view.tls.ca}` : ''}${view.tls.cert ? ` cert=${view.tls.cert}` : ''}${view.tls.server_name ? ` server_name=${view.tls.server_name}` : ''}`
              : 'off (plaintext)',
          }),
        ),
      );
    } catch (err) {
      process.exitCode = await reportClientError(err, undefined);
    }
  });
}
