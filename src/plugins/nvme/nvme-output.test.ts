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
