/**
 * The binary PCI configuration space a simulated function exposes as its sysfs
 * `config` file. lspci reads this file (at least the 64-byte standard header)
 * for every function, and prints the revision and header-derived fields from
 * it, so it must agree with the text attributes the builder writes beside it.
 *
 * A function with a Device Serial Number gets what a PCIe endpoint has: the
 * 4096-byte extended configuration space the kernel exposes for PCIe devices, a
 * standard capability list holding the PCI Express capability (without it the
 * kernel gives a 256-byte `config` and lspci walks no extended capability), and
 * at 0x100 an Advanced Error Reporting capability followed by the Device Serial
 * Number capability (ID 0003h), so a reader has a list to walk, as on real cards.
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
  /**
   * The PCIe Device Serial Number, 16 hex digits (most significant first, as
   * lspci prints it, dashes allowed); absent: no PCIe capability, no extended space.
   */
  deviceSerialNumber?: string | undefined;
}

/** Size of a conventional (non-extended) configuration space, as sysfs shows it to non-root. */
export const CONFIG_SPACE_SIZE = 256;
/** Size of a PCIe function's configuration space (extended capabilities from 0x100). */
export const EXTENDED_CONFIG_SPACE_SIZE = 4096;

/** Where the PCI Express capability sits in the standard list. */
const PCIE_CAP_AT = 0x40;
/** Extended capabilities: AER first (0x48 bytes, version 2), then the DSN. */
const AER_AT = 0x100;
const DSN_AT = 0x148;

/** `01-23-45-67-89-ab-cd-ef` or `0123456789abcdef` → 16 lower-case hex digits; throws otherwise. */
export function normaliseDsn(value: string): string {
  const digits = value.replaceAll('-', '').toLowerCase();
  if (!/^[0-9a-f]{16}$/.test(digits)) {
    throw new Error(`deviceSerialNumber: ${JSON.stringify(value)} is not 8 bytes of hex (01-23-…-ef)`);
  }
  return digits;
}

/**
 * A type-0 (endpoint) header with no BARs assigned, plus (with a DSN) the PCIe
 * capability and the extended list described above. Little-endian, as the
 * hardware and the kernel present it.
 */
export function buildConfigSpace(f: ConfigSpaceFields): Buffer {
  const dsn = f.deviceSerialNumber === undefined ? null : normaliseDsn(f.deviceSerialNumber);
  const b = Buffer.alloc(dsn === null ? CONFIG_SPACE_SIZE : EXTENDED_CONFIG_SPACE_SIZE);
  b.writeUInt16LE(Number.parseInt(f.vendorId, 16), 0x00);
  b.writeUInt16LE(Number.parseInt(f.productId, 16), 0x02);
  // Command: memory space (bit 1) and bus master (bit 2) while a driver uses it.
  b.writeUInt16LE(f.enabled ? 0x0006 : 0x0000, 0x04);
  // Status bit 4: a capabilities list (only the PCIe functions here have one).
  b.writeUInt16LE(dsn === null ? 0x0000 : 0x0010, 0x06);
  b.writeUInt8(Number.parseInt(f.revision, 16), 0x08);
  const klass = Number.parseInt(f.classCode, 16);
  b.writeUInt8(klass & 0xff, 0x09); // programming interface
  b.writeUInt8((klass >> 8) & 0xff, 0x0a); // sub class
  b.writeUInt8((klass >> 16) & 0xff, 0x0b); // base class
  b.writeUInt8(0x00, 0x0e); // header type 0, single function
  b.writeUInt16LE(Number.parseInt(f.subsystemVendorId, 16), 0x2c);
  b.writeUInt16LE(Number.parseInt(f.subsystemProductId, 16), 0x2e);
  b.writeUInt8(0x01, 0x3d); // interrupt pin INTA#
  if (dsn !== null) {
    b.writeUInt8(PCIE_CAP_AT, 0x34); // capabilities pointer
    // PCI Express capability: ID 10h, no next; version 2, device/port type 0 (endpoint).
    b.writeUInt8(0x10, PCIE_CAP_AT);
    b.writeUInt8(0x00, PCIE_CAP_AT + 1);
    b.writeUInt16LE(0x0002, PCIE_CAP_AT + 2);
    // Extended capability headers: ID bits 15:0, version 19:16, next offset 31:20.
    b.writeUInt32LE(((DSN_AT << 20) | (2 << 16) | 0x0001) >>> 0, AER_AT);
    b.writeUInt32LE((1 << 16) | 0x0003, DSN_AT);
    // The serial: the lower dword at +4, the upper at +8 (lspci prints the upper first).
    b.writeUInt32LE(Number.parseInt(dsn.slice(8), 16), DSN_AT + 4);
    b.writeUInt32LE(Number.parseInt(dsn.slice(0, 8), 16), DSN_AT + 8);
  }
  return b;
}
