/**
 * Progress lines of `shred --verbose` (GNU coreutils), run with LC_ALL=C so
 * sizes use '.' and no thousands separators:
 *
 *   shred: /dev/sdb: pass 1/1 (000000)...15MiB/29MiB 51%
 *   shred: /dev/sdb: pass 1/1 (000000)...
 *
 * The second form (no sizes) is printed at the start of a pass and for small
 * devices that finish within a second.
 */

export interface ShredProgress {
  pass: number;
  passes: number;
  /** Null when the line carries no size (start of a pass). */
  bytesDone: number | null;
  bytesTotal: number | null;
  percent: number | null;
}

const UNITS: Record<string, number> = {
  '': 1,
  B: 1,
  K: 1024,
  KiB: 1024,
  M: 1024 ** 2,
  MiB: 1024 ** 2,
  G: 1024 ** 3,
  GiB: 1024 ** 3,
  T: 1024 ** 4,
  TiB: 1024 ** 4,
  P: 1024 ** 5,
  PiB: 1024 ** 5,
  E: 1024 ** 6,
  EiB: 1024 ** 6,
};

/** `15MiB` → bytes (approximate: shred rounds the figure it prints). */
export function parseShredSize(text: string): number | null {
  const m = /^(\d+(?:\.\d+)?)([KMGTPE]i?B?|B)?$/.exec(text);
  if (!m) return null;
  const unit = UNITS[m[2] ?? ''] ?? UNITS[(m[2] ?? '').replace(/B$/, '')];
  return unit === undefined ? null : Math.round(Number(m[1]) * unit);
}

const LINE = /pass (\d+)\/(\d+) \([^)]*\)\.\.\.(?:(\S+)\/(\S+) (\d+)%)?\s*$/;

export function parseShredLine(line: string): ShredProgress | null {
  const m = LINE.exec(line);
  if (!m) return null;
  const done = m[3] === undefined ? null : parseShredSize(m[3]);
  const total = m[4] === undefined ? null : parseShredSize(m[4]);
  return {
    pass: Number(m[1]),
    passes: Number(m[2]),
    bytesDone: done,
    bytesTotal: total,
    percent: m[5] === undefined ? null : Math.min(100, Number(m[5])),
  };
}

/** Splits a stream of stderr chunks into lines and parses the progress ones. */
export class ShredProgressParser {
  private pending = '';

  constructor(private readonly onProgress: (p: ShredProgress) => void) {}

  push(chunk: string): void {
    this.pending += chunk;
    const lines = this.pending.split('\n');
    this.pending = lines.pop() ?? '';
    for (const line of lines) {
      const p = parseShredLine(line);
      if (p) this.onProgress(p);
    }
  }

  end(): void {
    const p = parseShredLine(this.pending);
    this.pending = '';
    if (p) this.onProgress(p);
  }
}
