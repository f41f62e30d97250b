/**
 * NVMe completion statuses the simulator can return, with the text libnvme 1.3's
 * `nvme_status_to_string()` gives them (copied from the strings of the real
 * libnvme.so.1.3.0). nvme-cli 2.3 prints them as `NVMe status: <text>(<%#x>)`,
 * the value including the DNR bit (0x4000) — parsers must only rely on the
 * trailing `(0x....)`.
 */

/** Do Not Retry: set on statuses a retry cannot fix. */
export const DNR = 0x4000;

export const Status = {
  INVALID_OPCODE: DNR | 0x01,
  INVALID_FIELD: DNR | 0x02,
  INTERNAL: 0x06,
  INVALID_NS: DNR | 0x0b,
  SANITIZE_FAILED: 0x1c,
  /** No DNR: retrying once the sanitize has finished succeeds. */
  SANITIZE_IN_PROGRESS: 0x1d,
  LBA_RANGE: DNR | 0x80,
  CAPACITY_EXCEEDED: DNR | 0x81,
  INVALID_FORMAT: DNR | 0x10a,
  NS_INSUFFICIENT_CAP: DNR | 0x115,
  NS_ID_UNAVAILABLE: DNR | 0x116,
  NS_ALREADY_ATTACHED: DNR | 0x118,
  NS_NOT_ATTACHED: DNR | 0x11a,
  CTRL_LIST_INVALID: DNR | 0x11c,
} as const;

/** Generic command status (SCT 0) texts. */
const GENERIC: Record<number, string> = {
  1: 'Invalid Command Opcode: A reserved coded value or an unsupported value in the command opcode field',
  2: 'Invalid Field in Command: A reserved coded value or an unsupported value in a defined field',
  6: 'Internal Error: The command was not completed successfully due to an internal error',
  11: 'Invalid Namespace or Format: The namespace or the format of that namespace is invalid',
  28: 'Sanitize Failed: The most recent sanitize operation failed and no recovery action has been successfully completed',
  29: 'Sanitize In Progress: The requested function is prohibited while a sanitize operation is in progress',
  128: 'LBA Out of Range: The command references an LBA that exceeds the size of the namespace',
  129: 'Capacity Exceeded: Execution of the command has caused the capacity of the namespace to be exceeded',
  132: 'Format In Progress: A Format NVM command is in progress on the namespace',
};

/** Command specific status (SCT 1) texts. */
const CMD_SPECIFIC: Record<number, string> = {
  10: 'Invalid Format: The LBA Format specified is not supported',
  21: 'Namespace Insufficient Capacity: Creating the namespace requires more free space than is currently available',
  22: 'Namespace Identifier Unavailable: The number of namespaces supported has been exceeded',
  24: 'Namespace Already Attached: The controller is already attached to the namespace specified',
  25: 'Namespace Is Private: The namespace is private and is already attached to one controller',
  26: 'Namespace Not Attached: The request to detach the controller could not be completed because the controller is not attached to the namespace',
  28: 'Controller List Invalid: The controller list provided contains invalid controller ids',
};

/** libnvme 1.3 `nvme_status_to_string(status, false)`. */
export function statusText(status: number): string {
  const sct = (status >> 8) & 0x7;
  const sc = status & 0xff;
  const table = sct === 0 ? GENERIC : sct === 1 ? CMD_SPECIFIC : {};
  return table[sc] ?? 'Unknown';
}

/** The stderr line of `nvme_show_status()` for an NVMe status (no trailing context). */
export function statusLine(status: number): string {
  return `NVMe status: ${statusText(status)}(0x${status.toString(16)})\n`;
}
