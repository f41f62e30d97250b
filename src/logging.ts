import { type Logger, type LoggerOptions, pino } from 'pino';

const COMPONENT = /,"component":("(?:[^"\\]|\\.)*")/g;

/**
 * One `component` per line: a child logger that names a component under a
 * parent that already names one (`agent` → `cleanup`) gets the path of both
 * (`agent/cleanup`) instead of a second `component` key, which JSON readers
 * resolve differently (jq keeps the last, some the first). pino writes a
 * child's bindings after its parent's, as text; this folds them once, when
 * the child is made.
 */
function oneComponent(child: Logger): void {
  const sym = pino.symbols.chindingsSym as unknown as keyof Logger;
  const chindings = (child as unknown as Record<symbol, unknown>)[sym as unknown as symbol];
  if (typeof chindings !== 'string') return;
  const found = [...chindings.matchAll(COMPONENT)];
  if (found.length < 2) return;
  const path = found.map((m) => JSON.parse(m[1]!) as string).join('/');
  let first = true;
  const folded = chindings.replace(COMPONENT, () => {
    if (!first) return '';
    first = false;
    return `,"component":${JSON.stringify(path)}`;
  });
  (child as unknown as Record<symbol, unknown>)[sym as unknown as symbol] = folded;
}

/**
 * The process logger. JSON lines on stderr (stdout belongs to command output),
 * or appended to `file` (`berth up` keeps machine logs out of its terminal);
 * level from BERTH_LOG_LEVEL (default info, silent under vitest unless set).
 * Every line is JSON with one `component` (oneComponent).
 */
export function createLogger(options: LoggerOptions = {}, file?: string): Logger {
  const level = process.env.BERTH_LOG_LEVEL ?? (process.env.VITEST ? 'silent' : 'info');
  return pino(
    {
      level,
      base: { pid: process.pid },
      redact: { paths: ['token', '*.token', 'authorization', '*.authorization'], censor: '[redacted]' },
      onChild: oneComponent,
      ...options,
    },
    file ? pino.destination({ dest: file, append: true, mkdir: true, sync: true }) : pino.destination(2),
  );
}

export type { Logger };
