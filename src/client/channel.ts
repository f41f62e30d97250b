/**
 * The client-channel module moved to src/transport/channel.ts, which the
 * servers may import too. This re-export stays only while the scheduler's
 * agent link imports it from here (src/server/scheduler/runtime/agent-link.ts
 * and runtime/backoff.ts); .dependency-cruiser.cjs lists those imports as
 * known violations. Nothing else may import it.
 */
export { Backoff, CHANNEL_OPTIONS, sleep } from '../transport/channel.js';
