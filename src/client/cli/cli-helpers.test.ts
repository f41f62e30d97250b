import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CleanupPhase } from '../../gen/berth/agent/v1/agent.js';
import { DeviceState, deviceStateToJSON } from '../../gen/berth/scheduler/v1/device.js';
import { LiveMigratable } from '../../gen/berth/scheduler/v1/profile.js';
import { dialTarget } from '../../transport/channel.js';
import { normalizeEndpoint, parseEndpoint } from '../client-config.js';
import { BerthClientError } from '../sdk.js';
import { UsageError } from '../usage-error.js';
import { progressLine, timeLeft } from './cleanup-progress.js';
import { errorLine } from './command-errors.js';
import { parseEnum, shortEnum } from './format.js';
import { instanceDevicesFromFile } from './instance-commands.js';
import { profileFromInput } from './profile-commands.js';
import { parseDeviceRef } from './references.js';

/** A BerthClientError as the SDK builds it from a gRPC status (fields only). */
function clientError(fields: Partial<BerthClientError>): BerthClientError {
  return Object.assign(Object.create(BerthClientError.prototype) as BerthClientError, {
    message: '',
    codeName: 'UNKNOWN',
    reason: undefined,
    fieldViolations: [],
    ...fields,
  });
}

describe('CLI helpers', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-cli-unit-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('names a device by uuid or host/address, and refuses anything else as a usage error', () => {
    expect(parseDeviceRef('1A109281-AA46-4CBE-9FF5-B598E6C95CCF')).toEqual({
      ref: { $case: 'uuid', value: '1a109281-aa46-4cbe-9ff5-b598e6c95ccf' },
    });
    expect(parseDeviceRef('sim-host-1/0000:3d:00.0')).toEqual({
      ref: { $case: 'hostAddress', value: { host: 'sim-host-1', address: '0000:3d:00.0' } },
    });
    for (const bad of ['0000:3d:00.0', 'sim-host-1/', '/0000:3d:00.0', 'not-a-uuid']) {
      expect(() => parseDeviceRef(bad), bad).toThrow(UsageError);
    }
  });

  it('shows enums by their short lower-case names and parses them back', () => {
    expect(shortEnum('DEVICE_STATE_PENDING_CLEANING', 'DEVICE_STATE_')).toBe('pending_cleaning');
    expect(shortEnum('DEVICE_STATE_UNSPECIFIED', 'DEVICE_STATE_')).toBe('');
    const states = [DeviceState.DEVICE_STATE_AVAILABLE, DeviceState.DEVICE_STATE_PENDING_CLEANING];
    expect(parseEnum('--state', 'pending-cleaning', 'DEVICE_STATE_', deviceStateToJSON, states)).toBe(
      DeviceState.DEVICE_STATE_PENDING_CLEANING,
    );
    expect(parseEnum('--state', 'AVAILABLE', 'DEVICE_STATE_', deviceStateToJSON, states)).toBe(
      DeviceState.DEVICE_STATE_AVAILABLE,
    );
    expect(() => parseEnum('--state', 'unspecified', 'DEVICE_STATE_', deviceStateToJSON, states)).toThrow(
      /--state: expected one of available, pending_cleaning, got "unspecified"/,
    );
  });

  it('formats an error as one line with its reason, adding only the field violations the message lacks', () => {
    expect(
      errorLine(
        clientError({
          codeName: 'FAILED_PRECONDITION',
          message: 'is available',
          reason: 'DEVICE_ALREADY_CLEAN',
        }),
      ),
    ).toBe('berth: FAILED_PRECONDITION: is available [DEVICE_ALREADY_CLEAN]');
    expect(
      errorLine(
        clientError({
          codeName: 'INVALID_ARGUMENT',
          message: 'nics[0].mac: "zz" is not a MAC',
          fieldViolations: [
            { field: 'nics[0].mac', description: '"zz" is not a MAC' },
            { field: 'disks[0].bus', description: 'unknown bus "floppy"' },
          ],
        }),
      ),
    ).toBe('berth: INVALID_ARGUMENT: nics[0].mac: "zz" is not a MAC (disks[0].bus: unknown bus "floppy")');
  });

  it('leaves out a reason that only repeats the code, and ends with a hint when there is one', () => {
    expect(
      errorLine(
        clientError({ codeName: 'INVALID_ARGUMENT', message: 'uuid: bad', reason: 'INVALID_ARGUMENT' }),
        'try again',
      ),
    ).toBe('berth: INVALID_ARGUMENT: uuid: bad; try again');
  });

  it('takes an endpoint as host:port, http://, https:// or a list of replicas, and explains anything else', () => {
    expect(normalizeEndpoint('127.0.0.1:7070', '--endpoint')).toBe('127.0.0.1:7070');
    expect(normalizeEndpoint(' http://localhost:7070/ ', '--endpoint')).toBe('localhost:7070');
    expect(normalizeEndpoint('HTTP://[::1]:7070', '--endpoint')).toBe('[::1]:7070');
    expect(parseEndpoint('https://a:7070', '--endpoint')).toEqual({ address: 'a:7070', scheme: 'https' });
    expect(parseEndpoint('10.0.0.1:7070, 10.0.0.2:7070', '--endpoint')).toEqual({
      address: '10.0.0.1:7070,10.0.0.2:7070',
      scheme: undefined,
    });
    for (const bad of ['127.0.0.1', 'a:0', 'a:70700', ':7070', 'http://a:7070/x', 'a b:7070', 'a:1,b']) {
      expect(() => normalizeEndpoint(bad, 'BERTH_ENDPOINT'), bad).toThrow(
        /^BERTH_ENDPOINT: expected host:port \(or http:\/\/host:port, https:\/\/host:port/,
      );
    }
  });

  it('dials a list of replicas as one ipv4/ipv6 target; refuses names and mixed families in a list', () => {
    expect(dialTarget('sched.example:7070')).toBe('sched.example:7070');
    expect(dialTarget('10.0.0.1:7070,10.0.0.2:7071')).toBe('ipv4:10.0.0.1:7070,10.0.0.2:7071');
    expect(dialTarget('[::1]:7070,[::2]:7070')).toBe('ipv6:[::1]:7070,[::2]:7070');
    expect(() => dialTarget('a.example:7070,10.0.0.1:7070')).toThrow(/IP addresses of one family/);
    expect(() => dialTarget('[::1]:7070,10.0.0.1:7070')).toThrow(/IP addresses of one family/);
  });

  it('ends a message without a stop when a reason or hint follows it (no "….;")', () => {
    expect(
      errorLine(clientError({ codeName: 'NOT_FOUND', message: 'device x not found.' }), 'check the name'),
    ).toBe('berth: NOT_FOUND: device x not found; check the name');
    expect(
      errorLine(
        clientError({ codeName: 'FAILED_PRECONDITION', message: 'busy.', reason: 'CLEANUP_IN_PROGRESS' }),
      ),
    ).toBe('berth: FAILED_PRECONDITION: busy [CLEANUP_IN_PROGRESS]');
    expect(errorLine(clientError({ codeName: 'INTERNAL', message: 'it broke.' }))).toBe(
      'berth: INTERNAL: it broke.',
    );
    // grpc-js's multi-line connection errors come out on one line.
    expect(
      errorLine(clientError({ codeName: 'UNAVAILABLE', message: 'a:\n. Resolution note: ' }), 'try'),
    ).not.toContain('\n');
  });

  it('estimates the time left itself: never "NFs", "--" until there is a rate', () => {
    expect(timeLeft(0, 5_000)).toBe('--');
    expect(timeLeft(50, 10_000)).toBe('10s');
    expect(timeLeft(25, 60_000)).toBe('3m00s');
    expect(timeLeft(100, 60_000)).toBe('0s');
  });

  it('prints a progress event as one key=value line', () => {
    expect(
      progressLine({
        jobId: 'j',
        address: '0000:3f:00.0',
        action: 'write-zeroes',
        phase: CleanupPhase.CLEANUP_PHASE_ZEROING,
        step: 'write-zeroes',
        percent: 41.6,
        bytesDone: 6_979_321,
        bytesTotal: 16_777_216,
        message: '',
        time: undefined,
        sequence: 7,
        proof: undefined,
        certificate: '',
      }),
    ).toBe('phase=zeroing percent=42 bytes=6979321/16777216 action=write-zeroes step=write-zeroes');
  });

  it('builds a profile from a file and flags; flags add a group and override the description', async () => {
    const file = join(dir, 'p.yaml');
    await writeFile(
      file,
      'name: gpu\ndescription: old\ngroups:\n  - {vendor_id: "10de", product_id: 25b6, live_migratable: no}\n',
    );
    const p = await profileFromInput(undefined, {
      file,
      description: 'new',
      resourceClass: 'CUSTOM_PCI_8086_154C',
      liveMigratable: 'yes',
      count: '2',
    });
    expect(p.name).toBe('gpu');
    expect(p.description).toBe('new');
    expect(p.groups.map((g) => [g.vendorId, g.resourceClass, g.liveMigratable, g.count])).toEqual([
      ['10de', '', LiveMigratable.LIVE_MIGRATABLE_NO, 1],
      ['', 'CUSTOM_PCI_8086_154C', LiveMigratable.LIVE_MIGRATABLE_YES, 2],
    ]);
  });

  it('refuses a profile without a name, without a group, with a misspelt key or a bad count', async () => {
    await expect(profileFromInput(undefined, { resourceClass: 'X' })).rejects.toThrow(
      /give the profile a name/,
    );
    await expect(profileFromInput('p', {})).rejects.toThrow(/needs a request group/);
    await expect(profileFromInput('p', { count: '2' })).rejects.toThrow(/qualify a group/);
    await expect(profileFromInput('p', { resourceClass: 'X', count: '0' })).rejects.toThrow(/--count/);
    await expect(profileFromInput('p', { resourceClass: 'X', liveMigratable: 'maybe' })).rejects.toThrow(
      /--live-migratable: expected one of yes, no/,
    );
    const file = join(dir, 'typo.yaml');
    await writeFile(file, 'name: p\ngroups:\n  - {resource_clas: X}\n');
    await expect(profileFromInput(undefined, { file })).rejects.toThrow(UsageError);
  });

  it('reads NICs and disks for set-devices and names a wrong field', async () => {
    const file = join(dir, 'devices.yaml');
    await writeFile(
      file,
      'nics:\n  - {mac: "52:54:00:00:00:01", address: "0000:00:03.0", tag: uplink, vlan: 100, devname: eth0}\ndisks:\n  - {bus: scsi, address: "0:0:0:0", serial: S1}\n',
    );
    const d = await instanceDevicesFromFile(file);
    expect(d.nics).toEqual([
      {
        mac: '52:54:00:00:00:01',
        address: '0000:00:03.0',
        tag: 'uplink',
        vlan: 100,
        model: '',
        devname: 'eth0',
      },
    ]);
    expect(d.disks).toEqual([{ serial: 'S1', bus: 'scsi', address: '0:0:0:0', path: '', tag: '' }]);
    await writeFile(file, 'nics:\n  - {address: "0000:00:03.0"}\n');
    await expect(instanceDevicesFromFile(file)).rejects.toThrow(/nics\.0\.mac/);
  });
});
