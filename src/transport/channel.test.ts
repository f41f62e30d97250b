import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Backoff, CHANNEL_OPTIONS, channelOptions, dropIpServernameWarning } from './channel.js';

/** Every non-test TypeScript file under src/ but the generated code. */
function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return name === 'gen' ? [] : sources(p);
    return name.endsWith('.ts') && !name.endsWith('.test.ts') ? [p] : [];
  });
}

describe('the client-channel module', () => {
  it('is the one place that sets a client keepalive or reconnect backoff (the servers set their own side)', () => {
    const root = join(import.meta.dirname, '..');
    const setters = sources(root).filter((f) =>
      /'grpc\.(keepalive_time_ms|initial_reconnect_backoff_ms|max_reconnect_backoff_ms)'/.test(
        readFileSync(f, 'utf8'),
      ),
    );
    expect(setters.map((f) => f.slice(root.length + 1)).sort()).toEqual([
      'server/grpc/server.ts',
      'transport/channel.ts',
    ]);
  });

  it('keeps idle connections alive and bounds the reconnect backoff; a server name becomes the TLS target name', () => {
    expect(CHANNEL_OPTIONS['grpc.keepalive_permit_without_calls']).toBe(1);
    expect(CHANNEL_OPTIONS['grpc.max_reconnect_backoff_ms']).toBeLessThanOrEqual(5_000);
    expect(channelOptions({ serverName: 'scheduler.example' })).toMatchObject({
      'grpc.ssl_target_name_override': 'scheduler.example',
      'grpc.keepalive_time_ms': 20_000,
    });
    expect(channelOptions(undefined)).not.toHaveProperty('grpc.ssl_target_name_override');
  });

  it('backs off with jitter up to its cap, and starts again after a reset', () => {
    const b = new Backoff(100, 1_000);
    const delays = Array.from({ length: 8 }, () => b.next());
    expect(delays[0]).toBeGreaterThanOrEqual(50);
    expect(delays[0]).toBeLessThanOrEqual(100);
    expect(Math.max(...delays)).toBeLessThanOrEqual(1_000);
    expect(delays.at(-1)).toBeGreaterThanOrEqual(500);
    b.reset();
    expect(b.next()).toBeLessThanOrEqual(100);
  });

  it('drops Node’s DEP0123 warning and passes every other warning on', async () => {
    dropIpServernameWarning();
    const seen: string[] = [];
    const onWarning = (w: Error & { code?: string }) => seen.push(w.code ?? w.message);
    process.on('warning', onWarning);
    try {
      process.emitWarning(
        'Setting the TLS ServerName to an IP address is not permitted',
        'DeprecationWarning',
        'DEP0123',
      );
      process.emitWarning('something else', { type: 'DeprecationWarning', code: 'DEP9999' });
      process.emitWarning('and another', { code: 'DEP0123' } as never);
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off('warning', onWarning);
    }
    expect(seen).toEqual(['DEP9999']);
  });
});
