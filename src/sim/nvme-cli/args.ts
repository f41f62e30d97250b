/**
 * nvme-cli 2.3's argument parsing: argconfig on top of glibc `getopt_long_only`.
 *
 * Reproduced rather than approximated because drivers get it wrong in ways the
 * real tool tolerates (or not): single-dash long options (`-namespace-id 1`),
 * unique prefixes (`--ns 1`, `-f` for `--force`), `--opt=value`, clustered
 * short flags (`-vb`), argv permutation (the device may come after options),
 * and argconfig's value checks (`Expected short argument for 'block-count' but
 * got '65536'!`, which are printed *without* the help text, while getopt's own
 * errors are followed by the command help). Messages follow glibc 2.36 and
 * `util/argconfig.c@v2.3` byte for byte; the tests compare them with the real
 * binary where it is installed.
 */

/** argconfig value types, named after the `CFG_*` constants they mirror. */
export type OptKind =
  | 'flag' // CFG_NONE / CFG_FLAG: no argument
  | 'byte' // CFG_BYTE: strtoul, < 256
  | 'short' // CFG_SHORT: strtoul, < 65536
  | 'word' // CFG_POSITIVE: strtoul truncated to u32
  | 'suffix' // CFG_LONG_SUFFIX: strtoull + binary K/M/G/T/P/E suffix
  | 'string'; // CFG_STRING

export interface OptSpec {
  long: string;
  short?: string;
  kind: OptKind;
  /** Names accepted instead of a number (argconfig value lists, e.g. `--sanact=start-crypto-erase`). */
  values?: { name: string; value: number }[];
}

export type OptValue = boolean | number | bigint | string;

export interface ParsedArgs {
  /** Values by long option name; flags are `true` when present. Last occurrence wins. */
  opts: Map<string, OptValue>;
  positionals: string[];
}

export type ParseResult =
  | { ok: true; args: ParsedArgs }
  /** `help`: print the command help after `message` (getopt errors, `--help`). */
  | { ok: false; message: string; help: boolean };

const KIND_WORD: Record<Exclude<OptKind, 'flag' | 'string'>, string> = {
  byte: 'byte',
  short: 'short',
  word: 'word',
  suffix: 'long suffixed integer',
};

/** The option argconfig appends to every command. */
const HELP_OPT: OptSpec = { long: 'help', short: 'h', kind: 'flag' };

const U64_MAX = (1n << 64n) - 1n;

/**
 * C `strtoul(s, &end, 0)` on LP64: leading blanks, optional sign (negative
 * values wrap modulo 2^64), `0x` hex / leading-0 octal / decimal. Returns the
 * value, how many characters were consumed (0 = no conversion) and ERANGE.
 */
export function strtoul(s: string): { value: bigint; end: number; overflow: boolean } {
  let i = 0;
  while (i < s.length && ' \t\n\v\f\r'.includes(s[i] as string)) i++;
  let neg = false;
  if (s[i] === '+' || s[i] === '-') {
    neg = s[i] === '-';
    i++;
  }
  let base = 10;
  if (s[i] === '0' && (s[i + 1] === 'x' || s[i + 1] === 'X') && /[0-9a-fA-F]/.test(s[i + 2] ?? '')) {
    base = 16;
    i += 2;
  } else if (s[i] === '0') {
    base = 8;
  }
  const digits = base === 16 ? /[0-9a-fA-F]/ : base === 8 ? /[0-7]/ : /[0-9]/;
  const start = i;
  let value = 0n;
  while (i < s.length && digits.test(s[i] as string)) {
    value = value * BigInt(base) + BigInt(Number.parseInt(s[i] as string, 16));
    i++;
  }
  if (i === start) return { value: 0n, end: 0, overflow: false };
  const overflow = value > U64_MAX;
  if (overflow) value = U64_MAX;
  else if (neg) value = (U64_MAX + 1n - value) & U64_MAX;
  return { value, end: i, overflow };
}

const BINARY_SUFFIX: Record<string, bigint> = { k: 10n, m: 20n, g: 30n, t: 40n, p: 50n, e: 60n };

/** Converts one option value the way argconfig does; undefined when argconfig would reject it. */
export function convert(spec: OptSpec, raw: string): OptValue | undefined {
  if (spec.values) {
    const lower = raw.toLowerCase();
    const hits = raw === '' ? [] : spec.values.filter((v) => v.name.startsWith(lower));
    if (hits.length === 1) return (hits[0] as { value: number }).value;
    if (hits.length > 1) return undefined;
  }
  switch (spec.kind) {
    case 'string':
      return raw;
    case 'flag':
      return true;
    case 'byte':
    case 'short': {
      const r = strtoul(raw);
      const limit = spec.kind === 'byte' ? 256n : 65536n;
      if (r.overflow || r.end === 0 || r.value >= limit) return undefined;
      return Number(r.value);
    }
    case 'word': {
      const r = strtoul(raw);
      if (r.overflow || r.end === 0) return undefined;
      return Number(r.value & 0xffffffffn);
    }
    case 'suffix': {
      const r = strtoul(raw);
      if (r.overflow) return undefined;
      const rest = raw.slice(r.end);
      if (rest === '') return r.value;
      const shift = BINARY_SUFFIX[(rest[0] as string).toLowerCase()];
      if (shift === undefined) return undefined;
      return (r.value << shift) & U64_MAX;
    }
  }
}

/** argconfig's message for a value it cannot convert. */
export function valueError(spec: OptSpec, raw: string): string {
  const word = spec.values ? 'byte' : KIND_WORD[spec.kind as keyof typeof KIND_WORD];
  return `Expected ${word} argument for '${spec.long}' but got '${raw}'!\n`;
}

/**
 * Parses `argv` (the words after the sub-command) like argconfig_parse() of
 * nvme-cli 2.3 does for command `cmd`.
 */
export function parseArgs(cmd: string, argv: string[], specs: OptSpec[]): ParseResult {
  const all = [...specs, HELP_OPT];
  const opts = new Map<string, OptValue>();
  const positionals: string[] = [];

  const fail = (msg: string): ParseResult => ({ ok: false, message: `${cmd}: ${msg}\n`, help: true });
  const setValue = (spec: OptSpec, raw: string | undefined): ParseResult | undefined => {
    if (spec === HELP_OPT) return { ok: false, message: '', help: true };
    if (spec.kind === 'flag') {
      opts.set(spec.long, true);
      return undefined;
    }
    const v = convert(spec, raw ?? '');
    if (v === undefined) {
      const word = spec.values ? 'byte' : KIND_WORD[spec.kind as keyof typeof KIND_WORD];
      return {
        ok: false,
        message: `Expected ${word} argument for '${spec.long}' but got '${raw}'!\n`,
        help: false,
      };
    }
    opts.set(spec.long, v);
    return undefined;
  };

  let i = 0;
  while (i < argv.length) {
    const arg = argv[i] as string;
    i++;
    if (arg === '--') {
      positionals.push(...argv.slice(i));
      break;
    }
    if (!arg.startsWith('-') || arg === '-') {
      positionals.push(arg);
      continue;
    }
    const dashdash = arg.startsWith('--');
    const body = arg.slice(dashdash ? 2 : 1);
    const firstIsShort = all.some((s) => s.short === body[0]);
    // glibc: a single-dash word is tried as a long option unless it is exactly one valid short option.
    if (dashdash || body.length > 1 || !firstIsShort) {
      const prefix = dashdash ? '--' : '-';
      const eq = body.indexOf('=');
      const name = eq >= 0 ? body.slice(0, eq) : body;
      let found = all.find((s) => s.long === name);
      if (!found) {
        const matches = all.filter((s) => s.long.startsWith(name));
        if (matches.length > 1) {
          const list = matches.map((m) => ` '${prefix}${m.long}'`).join('');
          return fail(`option '${prefix}${body}' is ambiguous; possibilities:${list}`);
        }
        found = matches[0];
      }
      if (!found) {
        if (dashdash || !firstIsShort) return fail(`unrecognized option '${prefix}${body}'`);
        // Otherwise fall through: glibc re-reads it as a cluster of short options.
      } else {
        let raw: string | undefined;
        if (eq >= 0) {
          if (found.kind === 'flag') return fail(`option '${prefix}${found.long}' doesn't allow an argument`);
          raw = body.slice(eq + 1);
        } else if (found.kind !== 'flag') {
          if (i >= argv.length) return fail(`option '${prefix}${found.long}' requires an argument`);
          raw = argv[i] as string;
          i++;
        }
        const err = setValue(found, raw);
        if (err) return err;
        continue;
      }
    }
    // Short option cluster, e.g. -vb or -n1.
    for (let j = 0; j < body.length; j++) {
      const ch = body[j] as string;
      const spec = all.find((s) => s.short === ch);
      if (!spec) return fail(`invalid option -- '${ch}'`);
      let raw: string | undefined;
      if (spec.kind !== 'flag') {
        if (j + 1 < body.length) raw = body.slice(j + 1);
        else if (i < argv.length) {
          raw = argv[i] as string;
          i++;
        } else return fail(`option requires an argument -- '${ch}'`);
        j = body.length;
      }
      const err = setValue(spec, raw);
      if (err) return err;
    }
  }
  return { ok: true, args: { opts, positionals } };
}
