import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  capabilitiesOf,
  capacity,
  parseCreatedNsid,
  parseIdCtrl,
  parseNsidList,
  parseNvmeStatus,
  parseNvmeVersion,
  parseSanitizeLog,
  parseSmartLog,
} from './nvme-output.js';

/** An nvme-cli 2.3 id-ctrl excerpt: int32 bitfields, string capacities, padded strings. */
const ID_CTRL_23 = `{
  "vid":5559,
  "ssvid":5559,
  "sn":"1951B3444502        ",
  "mn":"WDC PC SN730 SDBQNTY-256G-1001          ",
  "fr":"11170101",
  "cntlid":4,
  "oacs":95,
  "oncs":95,
  "fna":4,
  "sanicap":-1610612733,
  "nn":-1,
  "tnvmcap":"3,200,631,791,616",
  "unvmcap":"0"
}`;

/** The ironic-python-agent sample (nvme-cli 1.x): numeric tnvmcap, unsigned sanicap. */
const ID_CTRL_1X = `{
  "vid" : 5559,
  "sn" : "1951B3444502        ",
  "mn" : "WDC PC SN730 SDBQNTY-256G-1001          ",
  "fr" : "11170101",
  "oacs" : 23,
  "tnvmcap" : 256060514304,
  "sanicap" : 1610612739,
  "nn" : 1,
  "oncs" : 95,
  "fna" : 4
}`;

describe('parseIdCtrl', () => {
  it('normalises 2.3 signed int32 fields: sanicap -1610612733 is 0xa0000003 (CES + BES)', () => {
    const id = parseIdCtrl(ID_CTRL_23);
    expect(id.sanicap).toBe(0xa0000003);
    expect(id.nn).toBe(0xffffffff);
    expect(capabilitiesOf(id)).toEqual({ ces: true, bes: true, wzs: true, nsManagement: true });
  });

  it('reads a locale-formatted tnvmcap string as exact bytes', () => {
    expect(parseIdCtrl(ID_CTRL_23).tnvmcap).toBe(3_200_631_791_616n);
  });

  it('trims the fixed-width sn/mn/fr', () => {
    const id = parseIdCtrl(ID_CTRL_23);
    expect(id.sn).toBe('1951B3444502');
    expect(id.mn).toBe('WDC PC SN730 SDBQNTY-256G-1001');
    expect(id.fr).toBe('11170101');
    expect(id.cntlid).toBe(4);
  });

  it('accepts nvme-cli 1.x numeric tnvmcap and unsigned sanicap', () => {
    const id = parseIdCtrl(ID_CTRL_1X);
    expect(id.tnvmcap).toBe(256060514304n);
    expect(id.sanicap).toBe(0x60000003);
    expect(capabilitiesOf(id)).toEqual({ ces: true, bes: true, wzs: true, nsManagement: false });
    expect(id.cntlid).toBe(0);
  });

  it('keeps a numeric tnvmcap above 2^53 exact', () => {
    const id = parseIdCtrl(ID_CTRL_1X.replace('256060514304', '36028797018963971'));
    expect(id.tnvmcap).toBe(36028797018963971n);
  });

  it('reads WZS from ONCS bit 3 and namespace management from OACS bit 3 only', () => {
    const id = parseIdCtrl(
      ID_CTRL_1X.replace('"oncs" : 95', '"oncs" : 7').replace('"oacs" : 23', '"oacs" : 8'),
    );
    expect(capabilitiesOf(id)).toMatchObject({ wzs: false, nsManagement: true });
  });

  it('treats a missing sanicap (pre-1.3 controller) as no sanitize', () => {
    const id = parseIdCtrl(ID_CTRL_1X.replace('"sanicap" : 1610612739,', ''));
    expect(capabilitiesOf(id)).toMatchObject({ ces: false, bes: false });
  });

  it.each([
    ['not JSON', 'identify controller: Input/output error'],
    ['sanicap not a number', ID_CTRL_23.replace('-1610612733', '"0x3"')],
    ['tnvmcap negative', ID_CTRL_23.replace('"3,200,631,791,616"', '"-5"')],
    ['missing vid', ID_CTRL_23.replace('"vid":5559,', '')],
  ])('rejects %s', (_name, text) => {
    expect(() => parseIdCtrl(text)).toThrow(/id-ctrl/);
  });

  it('capacity: any thousands separator round-trips the digits', () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: 0n, max: 2n ** 128n - 1n }),
        fc.constantFrom(',', '.', "'", ' ', '\u202f'),
        (n, sep) => {
          const formatted = n.toString().replace(/\B(?=(\d{3})+(?!\d))/g, sep);
          expect(capacity(formatted, 'tnvmcap')).toBe(n);
        },
      ),
    );
  });
});

describe('parseSanitizeLog', () => {
  const log23 = (status: string, sprog = 65535, dev = 'nvme0') =>
    JSON.stringify({
      [dev]: {
        sprog,
        sstat: { global_erased: 1, no_cmplted_passes: 0, status },
        cdw10_info: 4,
        time_over_write: -1,
        time_block_erase: -1,
        time_crypto_erase: -1,
      },
    });

  it('takes the single value of the device-named wrapper and the (N) of sstat.status', () => {
    expect(parseSanitizeLog(log23('(2) Sanitize in Progress.', 655, 'nvme3n1'))).toEqual({
      status: 2,
      statusText: 'Sanitize in Progress.',
      sprog: 655,
      globalErased: true,
      scdw10: 4,
    });
    expect(parseSanitizeLog(log23('(3) Most Recent Sanitize Command Failed.')).status).toBe(3);
  });

  it('accepts a numeric SSTAT (other versions) and an unwrapped log', () => {
    expect(parseSanitizeLog('{"sprog":65535,"sstat":257}')).toMatchObject({
      status: 1,
      globalErased: true,
      scdw10: null,
    });
  });

  it('normalises a signed sprog', () => {
    expect(parseSanitizeLog(log23('(2) x', -1)).sprog).toBe(0xffff);
  });

  it.each([
    ['two devices', '{"a":{"sprog":1,"sstat":1},"b":{"sprog":1,"sstat":1}}'],
    ['status without a code', log23('Sanitize in Progress.')],
    ['garbage', 'sanitize status log: Invalid argument'],
  ])('rejects %s', (_n, text) => {
    expect(() => parseSanitizeLog(text)).toThrow(/sanitize-log/);
  });
});

describe('parseNvmeStatus', () => {
  it('parses the 2.3 text and the trailing hex with DNR', () => {
    const s = parseNvmeStatus(
      'NVMe status: Invalid Field in Command: A reserved coded value or an unsupported value in a defined field(0x4002)\n',
    );
    expect(s).toMatchObject({ value: 0x4002, sc: 0x02, sct: 0, dnr: true });
    expect(s?.text).toMatch(/^Invalid Field in Command/);
  });

  it('parses the 1.x wording the same way', () => {
    expect(
      parseNvmeStatus(
        'NVMe status: INVALID_OPCODE: The associated command opcode field is not valid(0x4001)',
      ),
    ).toMatchObject({ sc: 1, dnr: true });
  });

  it('returns null for errno failures', () => {
    expect(parseNvmeStatus('/dev/nvme9: No such file or directory\n')).toBeNull();
  });
});

describe('small parsers', () => {
  it('parses the created nsid and the version', () => {
    expect(parseCreatedNsid('create-ns: Success, created nsid:1\n')).toBe(1);
    expect(parseCreatedNsid('')).toBeNull();
    expect(parseNvmeVersion('nvme version 2.3 (git 2.3)\nlibnvme version 1.3 (git 1.3)\n')).toBe('2.3');
    expect(parseNvmeVersion('Usage: nvme <command>')).toBeNull();
    expect(parseNsidList('{"nsid_list":[{"nsid":1},{"nsid":-1}]}')).toEqual([1, 0xffffffff]);
    expect(() => parseNsidList('{"nsids":[]}')).toThrow(/nsid_list/);
  });
});

describe('parseSmartLog (nvme smart-log -o json)', () => {
  /** nvme-cli 2.3 under LC_ALL=C, derived from json_smart_log (nvme-print.c@v2.3) and json-c 0.16's layout. */
  const V23 =
    '{\n  "critical_warning":0,\n  "temperature":323,\n  "avail_spare":0,\n  "spare_thresh":0,\n' +
    '  "percent_used":0,\n  "endurance_grp_critical_warning_summary":0,\n  "data_units_read":"41",\n' +
    '  "data_units_written":"18446744073709551621",\n  "host_read_commands":"1029",\n' +
    '  "host_write_commands":"340282366920938463463374607431768211455",\n  "controller_busy_time":"0",\n' +
    '  "power_cycles":"0",\n  "power_on_hours":"0",\n  "unsafe_shutdowns":"0",\n  "media_errors":"0",\n' +
    '  "num_err_log_entries":"0",\n  "warning_temp_time":0,\n  "critical_comp_time":0,\n' +
    '  "thm_temp1_trans_count":0,\n  "thm_temp2_trans_count":0,\n  "thm_temp1_total_time":0,\n' +
    '  "thm_temp2_total_time":0\n}\n';

  /** Captured: nvme-cli 2.3 in the VM suite's guest (Debian 12), QEMU 7.2's controller, after a 64 KiB write. */
  const QEMU =
    '{\n  "critical_warning":0,\n  "temperature":323,\n  "avail_spare":0,\n  "spare_thresh":0,\n  "percent_used":0,\n  "endurance_grp_critical_warning_summary":0,\n  "data_units_read":"82",\n  "data_units_written":"1",\n  "host_read_commands":"84",\n  "host_write_commands":"1",\n  "controller_busy_time":"0",\n  "power_cycles":"0",\n  "power_on_hours":"0",\n  "unsafe_shutdowns":"0",\n  "media_errors":"0",\n  "num_err_log_entries":"0",\n  "warning_temp_time":0,\n  "critical_comp_time":0,\n  "thm_temp1_trans_count":0,\n  "thm_temp2_trans_count":0,\n  "thm_temp1_total_time":0,\n  "thm_temp2_total_time":0\n}\n';

  it('reads what nvme-cli 2.3 printed for QEMU 7.2’s controller', () => {
    expect(parseSmartLog(QEMU)).toEqual({
      dataUnitsWritten: 1n,
      hostWriteCommands: 1n,
      powerCycles: 0n,
      powerOnHours: 0n,
    });
  });

  it("reads 2.3's 128-bit counters (strings) exactly, past 2^64 and up to 2^128 - 1", () => {
    expect(parseSmartLog(V23)).toEqual({
      dataUnitsWritten: 2n ** 64n + 5n,
      hostWriteCommands: 2n ** 128n - 1n,
      powerCycles: 0n,
      powerOnHours: 0n,
    });
  });

  it("reads them with the locale's thousands separators (2.3 without LC_ALL=C) and as 1.x's numbers", () => {
    const en = V23.replace('"18446744073709551621"', '"18,446,744,073,709,551,621"').replace(
      '"power_on_hours":"0"',
      '"power_on_hours":"1\u202f234"',
    );
    expect(parseSmartLog(en)).toMatchObject({ dataUnitsWritten: 2n ** 64n + 5n, powerOnHours: 1234n });
    // 1.x printed them as JSON numbers (doubles): read from the text, exact past 2^53.
    const v1 = V23.replace('"18446744073709551621"', '9007199254740993').replace(
      '"0",\n  "power_on',
      '7,\n  "power_on',
    );
    expect(parseSmartLog(v1)).toMatchObject({ dataUnitsWritten: 9007199254740993n, powerCycles: 7n });
  });

  it('fails closed: a missing counter, a negative, a fraction or a value past 128 bits is an error naming it', () => {
    expect(() => parseSmartLog(V23.replace('"power_cycles":"0",\n', ''))).toThrow(
      'smart-log: no power_cycles',
    );
    expect(() => parseSmartLog(V23.replace('"power_cycles":"0"', '"power_cycles":-1'))).toThrow(
      'smart-log field power_cycles: -1 is not a 128-bit counter',
    );
    expect(() => parseSmartLog(V23.replace('"power_cycles":"0"', '"power_cycles":1.5'))).toThrow(
      /power_cycles: 1.5/,
    );
    expect(() => parseSmartLog(V23.replace('"power_cycles":"0"', `"power_cycles":"${2n ** 128n}"`))).toThrow(
      /power_cycles/,
    );
    expect(() => parseSmartLog(V23.replace('"power_cycles":"0"', '"power_cycles":"n/a"'))).toThrow(
      /power_cycles/,
    );
    expect(() => parseSmartLog('smart log: Inappropriate ioctl for device')).toThrow(/not JSON/);
    expect(() => parseSmartLog('[]')).toThrow('smart-log output is not a JSON object');
  });
});
