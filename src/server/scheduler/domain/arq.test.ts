import { describe, expect, it } from 'vitest';
import { type HostName, type PciAddress, parseUuid } from '../../../identifiers.js';
import { type Arq, arqUnconfirmed } from './arq.js';

describe('a bind its agent did not confirm', () => {
  it('goes to bind_failed holding no device, and keeps its instance (DELETE ?instance= finds it)', () => {
    const bound: Arq = {
      uuid: parseUuid('arq', '5b2a1b1c-0000-4000-8000-000000000001'),
      profileName: 'p',
      groupId: 0,
      group: {} as Arq['group'],
      state: 'bound',
      instanceUuid: 'vm-1',
      host: 'h1' as HostName,
      deviceUuid: parseUuid('device', '5b2a1b1c-0000-4000-8000-000000000002'),
      deviceAddress: '0000:3d:00.0' as PciAddress,
      attachHandle: { domain: '0000', bus: '3d', device: '00', function: '0', managed: true },
      tag: '',
      error: '',
      createdAt: '2026-01-01T00:00:00Z',
      deviceType: 'NVME',
      novaEvent: { instanceUuid: 'vm-1', status: 'completed' },
    };
    expect(arqUnconfirmed(bound, 'agent away')).toMatchObject({
      state: 'bind_failed',
      instanceUuid: 'vm-1',
      host: null,
      deviceUuid: null,
      deviceAddress: null,
      attachHandle: null,
      error: 'agent away',
      novaEvent: { instanceUuid: 'vm-1', status: 'failed' },
    });
  });
});
