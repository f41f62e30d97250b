/**
 * Which calls the SDK retries, from the API itself: every RPC declares
 * `option idempotency_level` in proto/ (NO_SIDE_EFFECTS for reads, IDEMPOTENT
 * for writes that are safe to repeat by design — a natural key, a replace, a
 * no-op when already done), and the SDK reads those options from the
 * descriptor set the build ships (gen/berth.binpb beside the generated code),
 * not from method names. An RPC without a level (create-style calls whose
 * safety depends on a request id the caller may not send) is never retried.
 */
import { readFileSync } from 'node:fs';
import { createFileRegistry, fromBinary } from '@bufbuild/protobuf';
import { FileDescriptorSetSchema, MethodOptions_IdempotencyLevel } from '@bufbuild/protobuf/wkt';
import { DESCRIPTOR_SET } from '../descriptor-set.js';

export type IdempotencyLevel = 'NO_SIDE_EFFECTS' | 'IDEMPOTENT' | 'IDEMPOTENCY_UNKNOWN';

let levels: ReadonlyMap<string, IdempotencyLevel> | null = null;

/** Every Berth RPC by path (`/berth.scheduler.v1.DeviceService/GetDevice`) with its declared level. */
export function idempotencyLevels(): ReadonlyMap<string, IdempotencyLevel> {
  if (levels) return levels;
  const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, readFileSync(DESCRIPTOR_SET)));
  const out = new Map<string, IdempotencyLevel>();
  for (const file of registry.files) {
    if (!file.proto.package?.startsWith('berth.')) continue;
    for (const service of file.services) {
      for (const method of service.methods) {
        out.set(
          `/${service.typeName}/${method.name}`,
          MethodOptions_IdempotencyLevel[method.idempotency] as IdempotencyLevel,
        );
      }
    }
  }
  levels = out;
  return out;
}

/** Whether a call to `path` may be sent again after UNAVAILABLE. */
export function isRetryable(path: string): boolean {
  const level = idempotencyLevels().get(path);
  return level === 'NO_SIDE_EFFECTS' || level === 'IDEMPOTENT';
}
