import { type Logger, type LoggerOptions, pino } from 'pino';

/**
 * The process logger. JSON lines on stderr (stdout belongs to command output),
 * or appended to `file` (`berth up` keeps machine logs out of its terminal);
 * level from BERTH_LOG_LEVEL (default info, silent under vitest unless set).
 */
export function createLogger(options: LoggerOptions = {}, file?: string): Logger {
  const level = process.env.BERTH_LOG_LEVEL ?? (process.env.VITEST ? 'silent' : 'info');
  return pino(
    {
      level,
      base: { pid: process.pid },
      redact: { paths: ['token', '*.token', 'authorization', '*.authorization'], censor: '[redacted]' },
      ...options,
    },
    file ? pino.destination({ dest: file, append: true, mkdir: true, sync: true }) : pino.destination(2),
  );
}

export type { Logger };
