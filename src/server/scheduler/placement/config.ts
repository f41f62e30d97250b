import { resolve } from 'node:path';
import { z } from 'zod';
import {
  httpUrl,
  mapping,
  parseConfig,
  readSecretFile,
  readSettingsFile,
  seconds,
  section,
  text,
} from '../../../config-schema.js';
import { ConfigError } from '../../../errors.js';
import { show } from '../../../plugins/device-spec/messages.js';
import type { PlacementMode } from './port.js';

export type PlacementAuth =
  | { type: 'noauth'; user: string }
  | { type: 'token'; token: string }
  | {
      type: 'app-credential';
      authUrl: string;
      id?: string;
      name?: string;
      userId?: string;
      userName?: string;
      userDomainId?: string;
      userDomainName?: string;
      secret: string;
      interfaces?: string[];
      region?: string;
    };

export interface PlacementOptions {
  /** Placement's endpoint; null = from Keystone's catalog (app-credential only). */
  url: string | null;
  auth: PlacementAuth;
  mode: PlacementMode;
  /** Without Nova: create a root provider per host when none is named after it. */
  createRoots: boolean;
  /** Berth host → its compute node provider's name (the hypervisor hostname); default the host name. */
  computeNodes: Record<string, string>;
  pollSeconds: number;
  resyncSeconds: number;
  /** Between resyncs: how often the generations of Berth's providers are compared (drift.ts). */
  driftSeconds: number;
  timeoutSeconds: number;
  retryMaxSeconds: number;
}

/** The flags of `berth scheduler serve` (all optional; they override the file). */
export interface PlacementFlags {
  placementConfig?: string;
  placementUrl?: string;
  placementAuth?: string;
  placementTokenFile?: string;
  placementAuthUrl?: string;
  placementAppCredentialId?: string;
  placementAppCredentialSecretFile?: string;
  placementMode?: string;
  placementCreateRoots?: boolean;
}

const authSchema = section({
  type: z.enum(['noauth', 'token', 'app-credential'], {
    error: (iss) => `expected noauth, token or app-credential, got ${show(iss.input)}`,
  }),
  user: text().optional(),
  token_file: text('a file name').optional(),
  auth_url: httpUrl().optional(),
  application_credential_id: text().optional(),
  application_credential_name: text().optional(),
  application_credential_secret_file: text('a file name').optional(),
  user_id: text().optional(),
  user_name: text().optional(),
  user_domain_id: text().optional(),
  user_domain_name: text().optional(),
  interface: z.union([text(), z.array(text())]).optional(),
  region: text().optional(),
});

const fileSchema = section({
  url: httpUrl().optional(),
  mode: z
    .enum(['report', 'clean-one-time-use'], {
      error: (iss) => `expected report or clean-one-time-use, got ${show(iss.input)}`,
    })
    .optional(),
  create_roots: z.boolean({ error: (iss) => `expected true or false, got ${show(iss.input)}` }).optional(),
  compute_nodes: mapping('a mapping of Berth host → compute node name')
    .pipe(z.record(z.string(), text('a compute node name')))
    .optional(),
  poll_interval: seconds(0.05, 3600).optional(),
  resync_interval: seconds(1, 86_400).optional(),
  drift_interval: seconds(0.1, 3600).optional(),
  timeout: seconds(0.1, 600).optional(),
  retry_max: seconds(0.1, 3600).optional(),
  auth: authSchema.optional(),
});

/**
 * The Placement settings from the file and the flags, or null when neither
 * asks for Placement (no URL, no file, no auth: Placement stays off).
 */
export async function placementOptionsFromFlags(flags: PlacementFlags): Promise<PlacementOptions | null> {
  // Only the placement flags count: the CLI passes all of `scheduler serve`'s options (with their defaults).
  const any = Object.entries(flags).some(
    ([k, v]) => k.startsWith('placement') && v !== undefined && v !== false,
  );
  if (!any) return null;
  const where = flags.placementConfig ? `${flags.placementConfig}: ` : '';
  const { doc, base } = await readSettingsFile(
    flags.placementConfig,
    '--placement-config',
    'Placement settings',
  );
  const auth = { ...((doc.auth as Record<string, unknown> | undefined) ?? {}) };
  const set = (key: string, value: unknown) => {
    if (value !== undefined) auth[key] = value;
  };
  set('type', flags.placementAuth);
  set('token_file', flags.placementTokenFile);
  set('auth_url', flags.placementAuthUrl);
  set('application_credential_id', flags.placementAppCredentialId);
  set('application_credential_secret_file', flags.placementAppCredentialSecretFile);
  const merged: Record<string, unknown> = { ...doc, ...(Object.keys(auth).length > 0 ? { auth } : {}) };
  if (flags.placementUrl !== undefined) merged.url = flags.placementUrl;
  if (flags.placementMode !== undefined) merged.mode = flags.placementMode;
  if (flags.placementCreateRoots) merged.create_roots = true;
  let c: z.output<typeof fileSchema>;
  try {
    c = parseConfig(fileSchema, merged);
  } catch (err) {
    throw new ConfigError(`${where}placement: ${(err as Error).message}`);
  }
  const a = c.auth;
  if (!a) {
    throw new ConfigError(
      `${where}placement: auth.type is required (--placement-auth noauth|token|app-credential)`,
    );
  }
  const file = (p: string) => resolve(base, p);
  let resolved: PlacementAuth;
  if (a.type === 'noauth') {
    resolved = { type: 'noauth', user: a.user ?? 'admin' };
  } else if (a.type === 'token') {
    if (!a.token_file)
      throw new ConfigError(
        `${where}placement.auth.token_file: required with auth type token (--placement-token-file)`,
      );
    resolved = {
      type: 'token',
      token: await readSecretFile(file(a.token_file), 'placement.auth.token_file'),
    };
  } else {
    if (!a.auth_url)
      throw new ConfigError(
        `${where}placement.auth.auth_url: required with auth type app-credential (--placement-auth-url)`,
      );
    if (!a.application_credential_secret_file) {
      throw new ConfigError(
        `${where}placement.auth.application_credential_secret_file: required with auth type app-credential (--placement-app-credential-secret-file)`,
      );
    }
    if (!a.application_credential_id && !a.application_credential_name) {
      throw new ConfigError(
        `${where}placement.auth: application_credential_id (or application_credential_name with its user) is required (--placement-app-credential-id)`,
      );
    }
    resolved = {
      type: 'app-credential',
      authUrl: a.auth_url,
      secret: await readSecretFile(
        file(a.application_credential_secret_file),
        'placement.auth.application_credential_secret_file',
      ),
      ...(a.application_credential_id ? { id: a.application_credential_id } : {}),
      ...(a.application_credential_name ? { name: a.application_credential_name } : {}),
      ...(a.user_id ? { userId: a.user_id } : {}),
      ...(a.user_name ? { userName: a.user_name } : {}),
      ...(a.user_domain_id ? { userDomainId: a.user_domain_id } : {}),
      ...(a.user_domain_name ? { userDomainName: a.user_domain_name } : {}),
      ...(a.interface ? { interfaces: Array.isArray(a.interface) ? a.interface : [a.interface] } : {}),
      ...(a.region ? { region: a.region } : {}),
    };
  }
  if (!c.url && resolved.type !== 'app-credential') {
    throw new ConfigError(
      `${where}placement.url: required (--placement-url), unless Keystone's catalog gives it (app-credential)`,
    );
  }
  if (c.create_roots && (c.mode ?? 'report') !== 'report') {
    throw new ConfigError(
      `${where}placement.create_roots: only in mode report (in clean-one-time-use Nova's providers are used)`,
    );
  }
  return {
    url: c.url ?? null,
    auth: resolved,
    mode: c.mode ?? 'report',
    createRoots: c.create_roots ?? false,
    computeNodes: { ...(c.compute_nodes ?? {}) },
    pollSeconds: c.poll_interval ?? 10,
    resyncSeconds: c.resync_interval ?? 300,
    driftSeconds: c.drift_interval ?? 5,
    timeoutSeconds: c.timeout ?? 10,
    retryMaxSeconds: c.retry_max ?? 30,
  };
}
