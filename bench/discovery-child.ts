/**
 * Berth's discovery in a process of its own, for bench/discovery.ts: lspci
 * runs in its own process, so Berth does too, and the harness's own garbage
 * (lspci's output, the node:fs replay, the recorded list) is never collected
 * on Berth's time. Loads the plugin host from the agent configuration file
 * given as argv[2], as the agent does, then answers each `discover` line on
 * stdin with one JSON line: the pass's duration measured here, around
 * PluginHost.discover (what the agent runs every interval), and its counts.
 */
import { createInterface } from 'node:readline';
import { pino } from 'pino';
import { loadAgentConfig } from '../src/server/agent/config.js';
import { PluginHost } from '../src/server/agent/plugin-host.js';

const config = await loadAgentConfig(process.argv[2]!);
const host = await PluginHost.loadFor(config, { logger: pino({ level: 'silent' }) });
process.stdout.write(`${JSON.stringify({ ready: true, pid: process.pid })}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  if (line !== 'discover') break;
  const t0 = performance.now();
  const r = await host.discover({ strict: true });
  const ms = performance.now() - t0;
  process.stdout.write(`${JSON.stringify({ ms, devices: r.devices.length, excluded: r.excluded.length })}\n`);
}
