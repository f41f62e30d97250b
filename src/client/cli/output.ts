/**
 * Output for the berth CLI, in kubectl's manner: tables without borders,
 * upper-case headers, columns three spaces apart, fitted to 120 columns (the
 * widest cells cut with "…"), `-o wide` for the columns that do not fit (as
 * wide as its cells: full uuids, every flag), `show` as `key: value` lines
 * with long values wrapped under their column, and JSON or YAML for scripts.
 *
 * YAML is written so that YAML 1.1 readers (PyYAML, Ruby's Psych, Go's
 * yaml.v2) read back the same types as YAML 1.2 ones: every string that a
 * 1.1 reader would take for something else — `yes`/`no`/`on`/`off`/`y`/`n`,
 * `null`, numbers in any base or with `_`, sexagesimal `1:20` (PCI addresses
 * such as `0000:00:04.0`!), timestamps, `=` and `<<` — is quoted.
 */
import { Document, visit } from 'yaml';

export type OutputFormat = 'table' | 'wide' | 'json' | 'yaml';

export function parseFormat(value: string): OutputFormat {
  if (value === 'table' || value === 'wide' || value === 'json' || value === 'yaml') return value;
  throw new Error(`-o/--output: expected table, wide, json or yaml, got ${JSON.stringify(value)}`);
}

export interface Column<T> {
  header: string;
  get: (row: T) => unknown;
  /** Only in one view: 'table' (the default one) or 'wide' (-o wide). Absent: both. */
  only?: 'table' | 'wide';
  /** May be cut (with "…") so the default table fits its width. */
  shrink?: boolean;
  /** May be wrapped onto further lines so the default table fits its width. */
  wrap?: boolean;
  /** Never narrowed: an id or an address the commands take back. */
  fixed?: boolean;
}

/** The width a default table is fitted to. */
export const TABLE_WIDTH = 120;
const GAP = '   ';
const MIN_SHRUNK = 12;

function cell(v: unknown): string {
  if (v === null || v === undefined) return '';
  if (Array.isArray(v)) return v.join(',');
  if (v instanceof Date) return v.toISOString();
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v).replace(/\s*\n\s*/g, ' ');
}

const cut = (s: string, w: number) => (s.length <= w ? s : `${s.slice(0, Math.max(0, w - 1))}…`);

/**
 * A table: no borders, upper-case headers. The default view (`wide` false)
 * is fitted to `width`: first by narrowing its `shrink` and `wrap` columns,
 * widest first (a `shrink` cell is cut with "…", a `wrap` cell continues on
 * the next lines), then, if that is not enough, any column but the `fixed`
 * ones (ids and addresses a command takes back), down to its header.
 */
export function renderTable<T>(
  rows: readonly T[],
  columns: readonly Column<T>[],
  options: { wide?: boolean; width?: number } = {},
): string {
  const wide = options.wide ?? false;
  const cols = columns.filter((c) => !c.only || c.only === (wide ? 'wide' : 'table'));
  const headers = cols.map((c) => c.header.toUpperCase());
  const data = rows.map((r) => cols.map((c) => cell(c.get(r))));
  const widths = cols.map((_, i) => Math.max(headers[i]!.length, ...data.map((d) => d[i]!.length)));
  if (!wide) {
    const limit = options.width ?? TABLE_WIDTH;
    const total = () => widths.reduce((a, b) => a + b, 0) + GAP.length * (widths.length - 1);
    const narrow = (eligible: (c: Column<T>) => boolean, minimum: (i: number) => number) => {
      for (let over = total() - limit; over > 0; over = total() - limit) {
        let widest = -1;
        for (const [i, c] of cols.entries()) {
          if (eligible(c) && widths[i]! > minimum(i) && (widest < 0 || widths[i]! > widths[widest]!))
            widest = i;
        }
        if (widest < 0) return;
        widths[widest] = Math.max(minimum(widest), widths[widest]! - over);
      }
    };
    narrow(
      (c) => Boolean(c.shrink || c.wrap),
      (i) => Math.max(MIN_SHRUNK, headers[i]!.length),
    );
    narrow(
      (c) => !c.fixed,
      (i) => headers[i]!.length,
    );
  }
  const lines = (cells: string[]): string[] => {
    const parts = cells.map((c, i) =>
      cols[i]!.wrap && c.length > widths[i]!
        ? wrapText(c, widths[i]!).map((l) => cut(l, widths[i]!))
        : [cut(c, widths[i]!)],
    );
    const height = Math.max(...parts.map((p) => p.length));
    return Array.from({ length: height }, (_, k) =>
      parts
        .map((p, i) => (p[k] ?? '').padEnd(widths[i]!))
        .join(GAP)
        .trimEnd(),
    );
  };
  return [...lines(headers), ...data.flatMap(lines)].join('\n');
}

/** YAML that 1.1 and 1.2 readers read the same way (see the module comment). */
export function toYaml(data: unknown): string {
  const doc = new Document(data, {
    version: '1.1',
    // `<<` is a string here, never a merge key; the visitor below quotes it.
    customTags: (tags) =>
      tags.filter((t) => t !== 'merge' && (typeof t !== 'object' || t.tag !== 'tag:yaml.org,2002:merge')),
  });
  // The 1.1 schema quotes what it would resolve otherwise; `=` (1.1's value
  // tag) and `<<` (its merge key) it does not know as strings to guard.
  visit(doc, {
    Scalar(_key, node) {
      if (node.value === '=' || node.value === '<<') node.type = 'QUOTE_DOUBLE';
    },
  });
  return doc.toString();
}

/**
 * `value` in lines of at most `width` characters, broken after `, ` or at a
 * space (a word longer than the width stays whole).
 */
export function wrapText(value: string, width: number): string[] {
  const out: string[] = [];
  for (const paragraph of value.split('\n')) {
    let line = '';
    for (const word of paragraph.split(/(?<=, )|(?<= )/)) {
      if (line !== '' && (line + word).trimEnd().length > width) {
        out.push(line.trimEnd());
        line = '';
      }
      line += word;
    }
    out.push(line.trimEnd());
  }
  return out;
}

/**
 * One object as `key:  value` lines, values aligned (`show` commands); a
 * value longer than the line (TABLE_WIDTH) is wrapped, its further lines
 * indented under the first.
 */
export function renderRecord(record: Record<string, unknown>, width = TABLE_WIDTH): string {
  const entries = Object.entries(record);
  const w = Math.max(...entries.map(([k]) => k.length)) + 1;
  const indent = ' '.repeat(w + 2);
  return entries
    .map(([k, v]) => {
      const lines = wrapText(cell(v), Math.max(20, width - indent.length));
      return [
        `${`${k}:`.padEnd(w)}  ${lines[0] ?? ''}`.trimEnd(),
        ...lines.slice(1).map((l) => `${indent}${l}`),
      ].join('\n');
    })
    .join('\n');
}

/**
 * The output of a command: JSON or YAML of `data`, or the table view, which
 * `table` renders (`wide` for -o wide).
 */
export function render(format: OutputFormat, data: unknown, table: (wide: boolean) => string): string {
  if (format === 'json') return JSON.stringify(data, null, 2);
  if (format === 'yaml') return toYaml(data).trimEnd();
  return table(format === 'wide');
}

/**
 * Prints a list: its JSON or YAML (`[]` when empty), or its table — and for
 * an empty list `No <things> found.` on stderr instead, as kubectl says it.
 */
export function printList<T>(
  format: OutputFormat,
  rows: readonly T[],
  things: string,
  table: (wide: boolean) => string,
): void {
  if (rows.length === 0 && (format === 'table' || format === 'wide')) console.error(`No ${things} found.`);
  else console.log(render(format, rows, table));
}

/**
 * The shortest prefixes (at least `min` characters) that tell each id apart
 * from every other in `ids`, as git abbreviates commits: what the default
 * tables show, and what the commands accept back.
 */
export function uniquePrefixes(ids: readonly string[], min = 8): Map<string, string> {
  const out = new Map<string, string>();
  const sorted = [...new Set(ids)].sort();
  for (const [i, id] of sorted.entries()) {
    let n = min;
    for (const other of [sorted[i - 1], sorted[i + 1]]) {
      if (other === undefined) continue;
      let common = 0;
      while (common < id.length && id[common] === other[common]) common++;
      n = Math.max(n, common + 1);
    }
    out.set(id, id.slice(0, n));
  }
  return out;
}
