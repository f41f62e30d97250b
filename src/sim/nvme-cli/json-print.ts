/**
 * JSON output exactly as nvme-cli 2.3 produces it through json-c 0.16:
 * `json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PRETTY |
 * JSON_C_TO_STRING_NOSLASHESCAPE)` — two-space indent, `"key":value` with no
 * space, empty containers printed as `[\n  ]`, followed by a newline.
 *
 * The type quirks live here too: 2.3 routes every "uint" field through
 * `json_object_new_int` (int32), so u32 values with bit 31 set come out negative
 * ({@link int32}), and uint128 capacities are strings ({@link uint128String}).
 */

export type JsonValue = number | bigint | string | JsonValue[] | JsonObject;
export interface JsonObject {
  [key: string]: JsonValue;
}

/** What 2.3's `json_object_add_value_uint` does to a u32: reinterpret as int32. */
export function int32(value: number): number {
  return value | 0;
}

/**
 * 2.3's `uint128_t_to_string()`: decimal digits grouped with the locale's
 * thousands separator. The simulator behaves like a C/POSIX locale (empty
 * separator) unless LC_ALL/LC_NUMERIC/LANG names a locale such as en_US, in which
 * case it groups with ',' as glibc would — drivers must run nvme with LC_ALL=C.
 */
export function uint128String(value: number | bigint, env: NodeJS.ProcessEnv = process.env): string {
  const digits = BigInt(value).toString();
  const locale = env.LC_ALL || env.LC_NUMERIC || env.LANG || 'C';
  if (locale === 'C' || locale === 'POSIX' || locale.startsWith('C.')) return digits;
  return digits.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

function escapeString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0) as number;
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\b') out += '\\b';
    else if (ch === '\f') out += '\\f';
    else if (c < 0x20) out += `\\u00${c.toString(16).padStart(2, '0')}`;
    else out += ch;
  }
  return `${out}"`;
}

function indent(level: number): string {
  return '  '.repeat(level);
}

function render(v: JsonValue, level: number): string {
  if (typeof v === 'number' || typeof v === 'bigint') return String(v);
  if (typeof v === 'string') return escapeString(v);
  if (Array.isArray(v)) {
    const items = v.map((x) => indent(level + 1) + render(x, level + 1));
    return `[\n${items.join(',\n')}${items.length ? '\n' : ''}${indent(level)}]`;
  }
  const entries = Object.entries(v).map(
    ([k, x]) => `${indent(level + 1)}${escapeString(k)}:${render(x, level + 1)}`,
  );
  return `{\n${entries.join(',\n')}${entries.length ? '\n' : ''}${indent(level)}}`;
}

/** `json_print_object(root, NULL); printf("\n");` */
export function jsonPrint(obj: JsonObject): string {
  return `${render(obj, 0)}\n`;
}
