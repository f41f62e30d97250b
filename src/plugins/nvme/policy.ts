/**
 * The NVMe cleanup policy matrix (specs/nvme-secure-cleanup.txt, "Discovery
 * and Cleanup Resolution"): `clear_action` × `clear_strategy` × the
 * controller's capabilities → the one cleanup action locked in at discovery.
 *
 * Pure on purpose: it is the security decision of the driver, so it must be
 * testable exhaustively without a host. There is no runtime fallback — what
 * this returns is what cleanup runs; a policy the hardware cannot satisfy is an
 * error that keeps the device out of the pool.
 */
import type { ClearAction, ClearStrategy } from '../device-spec/index.js';

export type CleanupAction = 'sanitize-crypto' | 'sanitize-block' | 'write-zeroes' | 'shred';

export const CLEANUP_ACTIONS: readonly CleanupAction[] = [
  'sanitize-crypto',
  'sanitize-block',
  'write-zeroes',
  'shred',
];

/** Controller capabilities from `nvme id-ctrl`. */
export interface NvmeCapabilities {
  /** SANICAP bit 0: Crypto Erase Sanitize. */
  ces: boolean;
  /** SANICAP bit 1: Block Erase Sanitize. */
  bes: boolean;
  /** ONCS bit 3: Write Zeroes. */
  wzs: boolean;
  /** OACS bit 3: Namespace Management (used for consolidation on the zero path, never changes the action). */
  nsManagement: boolean;
}

export type PolicyResult = { action: CleanupAction } | { error: string };

/** The zero method's own chain: controller-side Write Zeroes, else host-side shred (Nova's volume_clear). */
function zeroChain(caps: NvmeCapabilities): CleanupAction {
  return caps.wzs ? 'write-zeroes' : 'shred';
}

const missing = (policy: string, need: string): { error: string } => ({
  error: `clear policy ${policy} needs ${need}, which the controller does not report`,
});

/**
 * Resolves the cleanup action exactly per the spec's matrix:
 *
 * | action   | strategy   | operation                                           |
 * |----------|------------|-----------------------------------------------------|
 * | auto     | auto       | CES sanitize, else BES sanitize, else write zeroes, else shred |
 * | auto     | crypto     | CES sanitize only                                   |
 * | auto     | block      | BES sanitize, else write zeroes, else shred         |
 * | sanitize | auto       | CES sanitize, else BES sanitize                     |
 * | sanitize | crypto     | CES sanitize only                                   |
 * | sanitize | block      | BES sanitize only                                   |
 * | zero     | auto/block | write zeroes, else shred                            |
 * | zero     | crypto     | invalid configuration                               |
 */
export function resolveCleanupAction(
  clearAction: ClearAction,
  clearStrategy: ClearStrategy,
  caps: NvmeCapabilities,
): PolicyResult {
  const policy = `clear_action=${clearAction} clear_strategy=${clearStrategy}`;
  switch (clearAction) {
    case 'auto':
      switch (clearStrategy) {
        case 'auto':
          if (caps.ces) return { action: 'sanitize-crypto' };
          if (caps.bes) return { action: 'sanitize-block' };
          return { action: zeroChain(caps) };
        case 'crypto':
          return caps.ces
            ? { action: 'sanitize-crypto' }
            : missing(policy, 'Crypto Erase Sanitize (SANICAP bit 0)');
        case 'block':
          if (caps.bes) return { action: 'sanitize-block' };
          return { action: zeroChain(caps) };
      }
      break;
    case 'sanitize':
      switch (clearStrategy) {
        case 'auto':
          if (caps.ces) return { action: 'sanitize-crypto' };
          if (caps.bes) return { action: 'sanitize-block' };
          return missing(policy, 'Crypto or Block Erase Sanitize (SANICAP bit 0 or 1)');
        case 'crypto':
          return caps.ces
            ? { action: 'sanitize-crypto' }
            : missing(policy, 'Crypto Erase Sanitize (SANICAP bit 0)');
        case 'block':
          return caps.bes
            ? { action: 'sanitize-block' }
            : missing(policy, 'Block Erase Sanitize (SANICAP bit 1)');
      }
      break;
    case 'zero':
      switch (clearStrategy) {
        case 'auto':
        case 'block':
          return { action: zeroChain(caps) };
        case 'crypto':
          // device_spec parsing already rejects this; kept so the matrix is total.
          return { error: `${policy} is an invalid configuration: zeroing is never a cryptographic erase` };
      }
      break;
  }
  return { error: `${policy} is not a known policy` };
}

export const isCleanupAction = (value: unknown): value is CleanupAction =>
  typeof value === 'string' && (CLEANUP_ACTIONS as readonly string[]).includes(value);
