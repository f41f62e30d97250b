/**
 * The binary PCI configuration space a simulated function exposes as its sysfs
 * `config` file. lspci reads this file (at least the 64-byte standard header)
 * for every function, and prints the revision and header-derived fields from
 * it, so it must agree with the text attributes the builder writes beside it.
 */

export interface ConfigSpaceFields {
  /** Four lower-case hex digits each. */
  vendorId: string;
  productId: string;
  /** Six hex digits: base class, sub class, programming interface. */
  classCode: string;
  /** Two hex digits. */
  revision: string;
  subsystemVendorId: string;
  subsystemProductId: string;
  /** Memory space + bus master enabled in the command register (a driver has the device). */
  enabled: boolean;
}

/** Size of a conventional (non-extended) configuration space, as sysfs shows it to non-root. */
export const CONFIG_SPACE_SIZE = 256;

/**
 * A type-0 (endpoint) header with no capability list and no BARs assigned.
 * Little-endian, as the hardware and the kernel present it.
 */
export function buildConfigSpace(f: ConfigSpaceFields): Buffer {
  const b = Buffer.alloc(CONFIG_SPACE_SIZE);
  b.writeUInt16LE(Number.parseInt(f.vendorId, 16), 0x00);
  b.writeUInt16LE(Number.parseInt(f.productId, 16), 0x02);
  // Command: memory space (bit 1) and bus master (bit 2) while a driver uses it.
  b.writeUInt16LE(f.enabled ? 0x0006 : 0x0000, 0x04);
  // Status: no capabilities list (bit 4 clear), so lspci -v walks nothing.
  b.writeUInt16LE(0x0000, 0x06);
  b.writeUInt8(Number.parseInt(f.revision, 16), 0x08);
  const klass = Number.parseInt(f.classCode, 16);
  b.writeUInt8(klass & 0xff, 0x09); // programming interface
  b.writeUInt8((klass >> 8) & 0xff, 0x0a); // sub class
  b.writeUInt8((klass >> 16) & 0xff, 0x0b); // base class
  b.writeUInt8(0x00, 0x0e); // header type 0, single function
  b.writeUInt16LE(Number.parseInt(f.subsystemVendorId, 16), 0x2c);
  b.writeUInt16LE(Number.parseInt(f.subsystemProductId, 16), 0x2e);
  b.writeUInt8(0x01, 0x3d); // interrupt pin INTA#
  return b;
}
