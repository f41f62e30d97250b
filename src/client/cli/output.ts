/**
 * Output for the berth CLI, in kubectl's manner: tables without borders,
 * upper-case headers, columns three spaces apart, fitted to 120 columns (the
 * widest cells cut with "…"), `-o wide` for the columns that do not fit,
 * `show` as `key: value` lines, and JSON or YAML for scripts.
 */
import { stringify as toYaml } from 'yaml';

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
 * is fitted to `width` by narrowing its `shrink` columns, widest first.
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
    for (let over = total() - limit; over > 0; over = total() - limit) {
      let widest = -1;
      for (const [i, c] of cols.entries()) {
        const floor = Math.max(MIN_SHRUNK, headers[i]!.length);
        if (c.shrink && widths[i]! > floor && (widest < 0 || widths[i]! > widths[widest]!)) widest = i;
      }
      if (widest < 0) break;
      const floor = Math.max(MIN_SHRUNK, headers[widest]!.length);
      widths[widest] = Math.max(floor, widths[widest]! - over);
    }
  }
  const line = (cells: string[]) =>
    cells
      .map((c, i) => cut(c, widths[i]!).padEnd(widths[i]!))
      .join(GAP)
      .trimEnd();
  return [line(headers), ...data.map(line)].join('\n');
}

/** One object as `key:  value` lines, values aligned (`show` commands). */
export function renderRecord(record: Record<string, unknown>): string {
  const entries = Object.entries(record);
  const w = Math.max(...entries.map(([k]) => k.length)) + 1;
  return entries.map(([k, v]) => `${`${k}:`.padEnd(w)}  ${cell(v)}`.trimEnd()).join('\n');
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
