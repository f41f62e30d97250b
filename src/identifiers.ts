/**
 * Berth's identifiers, parsed once where they enter (a gRPC request, a
 * configuration file, a command line, a sysfs listing) into branded strings.
 * Code inside accepts only the branded types, so a value that skipped the
 * parse does not type-check: a sysfs path built from an address, a Placement
 * URL built from a trait, a use case keyed by a host name.
 *
 * Each rule is written here once (docs/decisions.md 60). For each identifier:
 * `parseX(field, value)` returns the branded value or throws INVALID_ARGUMENT
 * naming the field and the value; `isX(value)` is the guard for code that
 * filters (a directory listing) rather than refuses.
 *
 * This module imports nothing but node:crypto and the error taxonomy: the domain, the drivers,
 * the agent, the scheduler and the client all import it.
 */
import { randomUUID } from 'node:crypto';
import { invalidArgument, show } from './errors.js';

/** A PCI function's address as sysfs names it: `0000:3b:02.0` (full, lower-case hex, function 0-7). */
export type PciAddress = string & { readonly __brand: 'PciAddress' };
/** A UUID in its canonical lower-case form. */
export type Uuid = string & { readonly __brand: 'Uuid' };
/** A Berth host's name: what an agent registers as and what its principal speaks for. */
export type HostName = string & { readonly __brand: 'HostName' };
/** A Placement resource class name: `CUSTOM_…` or a standard one (`PCI_DEVICE`, `VGPU`, …). */
export type ResourceClass = string & { readonly __brand: 'ResourceClass' };
/** A Placement trait name: `CUSTOM_…` or a standard one (`HW_GPU_API_VULKAN`, `OWNER_BERTH`, …). */
export type Trait = string & { readonly __brand: 'Trait' };
/** An instance id from the orchestration layer: a uuid in practice, any safe id accepted. */
export type InstanceId = string & { readonly __brand: 'InstanceId' };
/** A device role tag (specs/device-role-tagging.txt); '' is "no tag". */
export type Tag = string & { readonly __brand: 'Tag' };

const PCI_ADDRESS = /^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$/;
/** Either case is read; the canonical form (and so every `Uuid`) is lower-case. */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Letters, digits, `.`, `_`, `-`; starts and ends with a letter or digit; at most 254 characters. */
const HOST_NAME = /^[A-Za-z0-9]([A-Za-z0-9._-]{0,252}[A-Za-z0-9])?$/;
/**
 * Placement's names (resource classes and traits alike): upper-case letters,
 * digits and `_`, starting with a letter, at most 255 characters; a custom one
 * is `CUSTOM_` and at least one more character (Placement's
 * `^CUSTOM_[A-Z0-9_]+$`, maxLength 255). A standard name is any such name
 * that is not custom: whether this Placement knows it is the Placement
 * adapter's question, asked of the Placement it talks to.
 */
const PLACEMENT_NAME = /^(?!CUSTOM_$)[A-Z][A-Z0-9_]{0,254}$/;
/** Instance ids: 1-255 characters of letters, digits, `.`, `_`, `:`, `-`. */
const INSTANCE_ID = /^[A-Za-z0-9._:-]{1,255}$/;
/** Nova's tag rules: at most 60 characters, no `,` or `/` (they separate tags in Nova's boot syntax). */
export const MAX_TAG_LENGTH = 60;

// --- PCI addresses -----------------------------------------------------------

/** Whether `value` is a PCI address in the one form Berth accepts (see `PciAddress`). */
export const isPciAddress = (value: unknown): value is PciAddress =>
  typeof value === 'string' && PCI_ADDRESS.test(value);

/**
 * A PCI address, or INVALID_ARGUMENT naming `field`. Upper case is refused,
 * as it always was: sysfs names functions in lower case, and the CLI turns
 * what a user types (any case, lspci's short form) into this form first.
 */
export function parsePciAddress(field: string, value: unknown): PciAddress {
  if (!isPciAddress(value)) {
    throw invalidArgument(
      field,
      `${show(value)} is not a PCI address like 0000:3b:02.0 (lower-case hex, function 0-7)`,
    );
  }
  return value;
}

/** The four fields of an address, as hex text. */
export function pciAddressParts(address: PciAddress): {
  domain: string;
  bus: string;
  slot: string;
  function: string;
} {
  const m = PCI_ADDRESS.exec(address)!;
  return { domain: m[1]!, bus: m[2]!, slot: m[3]!, function: m[4]! };
}

// --- UUIDs -------------------------------------------------------------------

/** Whether `value` is a UUID in canonical lower-case form. */
export const isUuid = (value: unknown): value is Uuid =>
  typeof value === 'string' && UUID.test(value) && value === value.toLowerCase();

/** A UUID in either case, returned lower-case; INVALID_ARGUMENT naming `field` otherwise. */
export function parseUuid(field: string, value: unknown): Uuid {
  if (typeof value !== 'string' || !UUID.test(value)) {
    throw invalidArgument(field, `${show(value)} is not a UUID`);
  }
  return value.toLowerCase() as Uuid;
}

/** A new random UUID (node:crypto's is canonical already). */
export const newUuid = (): Uuid => randomUUID() as Uuid;

// --- host names --------------------------------------------------------------

/** Whether `value` is a host name (see `HOST_NAME`). */
export const isHostName = (value: unknown): value is HostName =>
  typeof value === 'string' && HOST_NAME.test(value);

/** A host name as given (case kept), or INVALID_ARGUMENT naming `field`. */
export function parseHostName(field: string, value: unknown): HostName {
  if (!isHostName(value)) throw invalidArgument(field, `${show(value)} is not a host name`);
  return value;
}

// --- Placement names ---------------------------------------------------------

/** Whether `value` is a resource class name (see `PLACEMENT_NAME`). */
export const isResourceClass = (value: unknown): value is ResourceClass =>
  typeof value === 'string' && PLACEMENT_NAME.test(value);

/** A resource class name, or INVALID_ARGUMENT naming `field`. */
export function parseResourceClass(field: string, value: unknown): ResourceClass {
  if (!isResourceClass(value)) {
    throw invalidArgument(
      field,
      `${show(value)} is not a resource class (CUSTOM_[A-Z0-9_]+ or a standard name, at most 255 characters)`,
    );
  }
  return value;
}

/** Whether `value` is a trait name (the same rule as a resource class's). */
export const isTrait = (value: unknown): value is Trait =>
  typeof value === 'string' && PLACEMENT_NAME.test(value);

/** A trait name, or INVALID_ARGUMENT naming `field`. */
export function parseTrait(field: string, value: unknown): Trait {
  if (!isTrait(value)) {
    throw invalidArgument(
      field,
      `${show(value)} is not a trait (CUSTOM_[A-Z0-9_]+ or a standard name, at most 255 characters)`,
    );
  }
  return value;
}

// --- instance ids and tags ---------------------------------------------------

/** An instance id, or INVALID_ARGUMENT naming `field`. */
export function parseInstanceId(field: string, value: unknown): InstanceId {
  if (typeof value !== 'string' || !INSTANCE_ID.test(value)) {
    throw invalidArgument(
      field,
      `${show(value)} is not an instance id (1-255 characters of [A-Za-z0-9._:-])`,
    );
  }
  return value as InstanceId;
}

/** A uuid as an instance id: Nova's instance ids are uuids (the Cyborg API parses them as such). */
export const instanceIdOf = (uuid: Uuid): InstanceId => uuid as string as InstanceId;

/** A device role tag ('' is "no tag" and valid), or INVALID_ARGUMENT naming `field` and the tag. */
export function parseTag(field: string, value: string): Tag {
  if (value.length > MAX_TAG_LENGTH) {
    throw invalidArgument(field, `tag "${value}" is ${value.length} characters, more than ${MAX_TAG_LENGTH}`);
  }
  if (value.includes(',') || value.includes('/')) {
    throw invalidArgument(field, `tag "${value}" must not contain "," or "/"`);
  }
  return value as Tag;
}
