/** Records of an older scheduler, completed before any rule reads them (upgrade.ts). */
import { describe, expect, it } from 'vitest';
import type { MediaState } from '../domain/media.js';
import { upgradeMedia } from './upgrade.js';

describe('upgradeMedia', () => {
  it('a media record from before custody names the host it was last seen on as its custodian, and no burn reason', () => {
    const old = { key: 'nvme:nqn.test:a', host: 'h1', burned: true } as unknown as MediaState;
    expect(upgradeMedia(old)).toMatchObject({ custodians: ['h1'], burnReason: '' });
    const nowhere = { key: 'nvme:nqn.test:b', host: '' } as unknown as MediaState;
    expect(upgradeMedia(nowhere).custodians).toEqual([]);
    // Today's records are left as they are.
    const today = { key: 'k', host: 'h1', custodians: ['h2'], burnReason: 'why' } as unknown as MediaState;
    expect(upgradeMedia(today)).toMatchObject({ custodians: ['h2'], burnReason: 'why' });
  });
});
