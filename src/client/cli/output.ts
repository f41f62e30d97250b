/** Output for the berth CLI: tables like the openstack CLI, JSON and YAML like kubectl -o. */
import { stringify as toYaml } from 'yaml';

export type OutputFormat = 'table' | 'json' | 'yaml';

export function parseFormat(value: string): OutputFormat {
  if (value === 'table' || value === 'json' || value === 'yaml') return value;
  throw new Error(`-o/--output: expected table, json or yaml, got ${JSON.stringify(value)}`);
}

export interface Column<T> {
  header: string;
  get: (row: T) => unknown;
}

function cell(v: unknown): string {
  if (v === null || v === undefined) return '';
  if (Array.isArray(v)) return v.join(',');
  if (v instanceof Date) return v.toISOString();
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

/** A boxed table in the openstack CLI's style. */
export function renderTable<T>(rows: readonly T[], columns: readonly Column<T>[]): string {
  const data = rows.map((r) => columns.map((c) => cell(c.get(r))));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...data.map((d) => d[i]!.length)));
  const line = `+${widths.map((w) => '-'.repeat(w + 2)).join('+')}+`;
  const fmt = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [line, fmt(columns.map((c) => c.header)), line, ...data.map(fmt), line].join('\n');
}

/** Field/value table for one object (`show` commands). */
export function renderRecord(record: Record<string, unknown>): string {
  const rows = Object.entries(record).map(([field, value]) => ({ field, value }));
  return renderTable(rows, [
    { header: 'Field', get: (r) => r.field },
    { header: 'Value', get: (r) => r.value },
  ]);
}

export function render(format: OutputFormat, data: unknown, table: () => string): string {
  if (format === 'json') return JSON.stringify(data, null, 2);
  if (format === 'yaml') return toYaml(data).trimEnd();
  return table();
}
