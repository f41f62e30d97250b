/**
 * Configuration is validated by zod schemas (the agent's file, its auth/tls
 * sections, the drivers' sections); this module holds the field types they
 * share and turns a zod issue into the ConfigError operators read:
 * `<key path>: <what is wrong, with the value>` — the same messages the
 * hand-written checks printed. The schemas are also emitted as JSON Schema
 * (schema/agent-config.schema.json, `npm run gen:schema`) for editors.
 *
 * Every duration has a documented range: Node's timers hold at most
 * 2^31-1 ms (~24.8 days) and fire at once beyond it, and an interval of a
 * nanosecond is a busy loop; strings never carry a NUL (it cannot reach a
 * path, an argument or a name).
 */
import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { ConfigError } from './errors.js';
import { show } from './plugins/device-spec/messages.js';
import { parseStrictYaml } from './strict-yaml.js';

/** Node's timer limit in milliseconds; every configured duration stays below it. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** `a.b[2].c`; a key that is not a plain word is shown quoted: `a["we ird"]`. */
export function keyPathOf(path: readonly PropertyKey[]): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else if (typeof seg === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(seg))
      out += out === '' ? seg : `.${seg}`;
    else out += `[${show(String(seg))}]`;
  }
  return out;
}

/** The first issue as a ConfigError `<path>: <message>` (`where` prefixes the path). */
export function configError(issue: z.core.$ZodIssue, where: readonly PropertyKey[] = []): ConfigError {
  // An unknown key is named in the path, as every other mistake is.
  const key = issue.code === 'unrecognized_keys' ? issue.keys.slice(0, 1) : [];
  const path = keyPathOf([...where, ...issue.path, ...key]);
  return new ConfigError(path === '' ? issue.message : `${path}: ${issue.message}`);
}

/** Parses `value` with `schema`; any mistake is a ConfigError naming its key path under `where`. */
export function parseConfig<S extends z.ZodType>(
  schema: S,
  value: unknown,
  where: readonly PropertyKey[] = [],
): z.output<S> {
  const r = schema.safeParse(value);
  if (!r.success) throw configError(r.error.issues[0]!, where);
  return r.data;
}

/** A non-empty string without NUL, trimmed. */
export const text = (what = 'a non-empty string') =>
  z
    .string({ error: (iss) => `expected ${what}, got ${show(iss.input)}` })
    .refine((s) => s.trim() !== '', { error: (iss) => `expected ${what}, got ${show(iss.input)}` })
    .refine((s) => !s.includes('\0'), {
      error: (iss) => `${show(iss.input)} contains a NUL character`,
    })
    .transform((s) => s.trim());

/** Seconds in [min, max], fractions allowed. */
export const seconds = (min: number, max: number) => {
  const error = (iss: { input?: unknown }) =>
    `expected a number of seconds in [${min}, ${max}], got ${show(iss.input)}`;
  if (max * 1000 > MAX_TIMER_MS) throw new Error(`seconds(${min}, ${max}): beyond Node's timers`);
  return z.number({ error }).min(min, { error }).max(max, { error });
};

/** A `host:port` or `[v6]:port` address, port ≤ 65535. */
export const hostPort = () =>
  text('host:port').superRefine((value, ctx) => {
    if (!/^[^\s:/]+:\d{1,5}$/.test(value) && !/^\[[0-9a-fA-F:]+\]:\d{1,5}$/.test(value)) {
      ctx.addIssue({ code: 'custom', message: `expected host:port, got ${show(value)}` });
      return;
    }
    const port = Number(value.slice(value.lastIndexOf(':') + 1));
    if (port > 65535)
      ctx.addIssue({ code: 'custom', message: `port ${port} is out of range in ${show(value)}` });
  });

/** An http:// or https:// URL. */
export const httpUrl = () =>
  text('an http(s) URL').superRefine((v, ctx) => {
    let u: URL | null = null;
    try {
      u = new URL(v);
    } catch {
      // reported below
    }
    if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:')) {
      ctx.addIssue({ code: 'custom', message: `expected an http(s) URL, got ${show(v)}` });
    }
  });

/** A secret (a token, an application credential's secret) from a file, trimmed; a ConfigError naming `key` when unreadable or empty. */
export async function readSecretFile(path: string, key: string): Promise<string> {
  let value: string;
  try {
    value = (await readFile(path, 'utf8')).trim();
  } catch (err) {
    throw new ConfigError(`${key}: cannot read ${show(path)}: ${(err as Error).message}`);
  }
  if (!value) throw new ConfigError(`${key}: ${show(path)} is empty`);
  return value;
}

/**
 * A YAML file of settings given by `flag` (strict YAML, no unsafe strings, a
 * mapping) and the directory its relative paths are read from; an empty
 * mapping and the working directory when no file is given.
 */
export async function readSettingsFile(
  path: string | undefined,
  flag: string,
  what: string,
): Promise<{ doc: Record<string, unknown>; base: string }> {
  if (!path) return { doc: {}, base: process.cwd() };
  let raw: string;
  try {
    raw = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`${flag}: cannot read ${show(path)}: ${(err as Error).message}`);
  }
  const parsed = parseStrictYaml(raw) ?? {};
  refuseUnsafeStrings(parsed);
  if (typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new ConfigError(`${path}: expected a mapping of ${what}`);
  }
  return { doc: parsed as Record<string, unknown>, base: dirname(resolve(path)) };
}

/**
 * A configuration section: a mapping of exactly these keys (JSON Schema:
 * `additionalProperties: false`); another key is `<section>.<key>: unknown key
 * (known: …)`, anything but a mapping `<section>: expected a mapping, got …`.
 */
export function section<T extends z.ZodRawShape>(shape: T) {
  const known = Object.keys(shape).join(', ');
  return z.strictObject(shape, {
    error: (iss) => {
      if (iss.code === 'unrecognized_keys') return `unknown key (known: ${known})`;
      if (iss.code === 'invalid_type') return `expected a mapping, got ${show(iss.input)}`;
      return undefined;
    },
  });
}

/** A mapping (YAML map / JSON object); `what` names it in the message. */
export const mapping = (what = 'a mapping') =>
  z.record(z.string(), z.unknown(), { error: (iss) => `expected ${what}, got ${show(iss.input)}` });

/**
 * Checks a parsed document whole, before any schema, so that no section — an
 * external driver's included — lets through a string (key or value) holding a
 * NUL, or a `__proto__` key (which an object built from the document would
 * take as its prototype). A ConfigError names where.
 */
export function refuseUnsafeStrings(doc: unknown, path: PropertyKey[] = []): void {
  if (typeof doc === 'string') {
    if (doc.includes('\0'))
      throw new ConfigError(`${keyPathOf(path)}: ${show(doc)} contains a NUL character`);
    return;
  }
  if (Array.isArray(doc)) {
    for (const [i, item] of doc.entries()) refuseUnsafeStrings(item, [...path, i]);
    return;
  }
  if (doc !== null && typeof doc === 'object') {
    for (const [k, v] of Object.entries(doc)) {
      const at = keyPathOf([...path, k]);
      if (k.includes('\0')) throw new ConfigError(`${at}: the key contains a NUL character`);
      if (k === '__proto__') throw new ConfigError(`${at}: not a configuration key`);
      refuseUnsafeStrings(v, [...path, k]);
    }
  }
}
