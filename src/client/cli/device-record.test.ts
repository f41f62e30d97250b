import { describe, expect, it } from 'vitest';
import { ReadBack } from '../../gen/berth/agent/v1/cleanup_proof.js';
import { CleanupOutcome, Device } from '../../gen/berth/scheduler/v1/device.js';
import { deviceRecord } from './device-commands.js';
import { deviceView } from './views.js';

describe('device show (text)', () => {
  const d = Device.fromPartial({
    uuid: '5b2a1b1c-0000-4000-8000-000000000001',
    host: 'sim-host-1',
    address: '0000:3d:00.0',
    resourceProvider: 'sim-host-1_0000:3d:00.0',
    placementProviderName: 'compute-1_0000:3D:00.0',
    placementProviderUuid: '5b2a1b1c-0000-4000-8000-000000000002',
    lastCleanup: {
      jobId: 'job-1',
      action: 'sanitize-crypto',
      outcome: CleanupOutcome.CLEANUP_OUTCOME_SUCCEEDED,
      message: '',
      startedAt: new Date('2026-01-01T00:00:00Z'),
      finishedAt: new Date('2026-01-01T00:00:05Z'),
      proof: {
        method: 'nvme-sanitize',
        readBack: ReadBack.READ_BACK_NONE,
        bytesWritten: 0,
        bytesRead: 0,
        bytesTotal: 1024,
        findings: ['sanitize observed'],
      },
    },
  });

  it("says which provider name is Berth's and which Placement's, and the last cleanup in words, not JSON", () => {
    const text = deviceRecord(deviceView(d)).replace(/\n\s+/g, ' ');
    expect(text).toMatch(/resource_provider: +sim-host-1_0000:3d:00\.0 \(Berth's own name for it\)/);
    expect(text).toMatch(
      /placement_provider: +compute-1_0000:3D:00\.0 \(its provider in OpenStack Placement, as Nova names it; uuid 5b2a1b1c-0000-4000-8000-000000000002\)/,
    );
    const cleanup = /last_cleanup: +(.*)/.exec(text)![1]!;
    expect(cleanup).not.toContain('{');
    expect(cleanup).toContain(
      'succeeded, sanitize-crypto (job job-1), 2026-01-01T00:00:00.000Z → 2026-01-01T00:00:05.000Z; proof: nvme-sanitize, read-back none, 0 bytes written, 0 read of 1024, findings: sanitize observed',
    );
  });

  it('json keeps the fields as they were', () => {
    const v = deviceView(d);
    expect(v.resource_provider).toBe('sim-host-1_0000:3d:00.0');
    expect(v).toMatchObject({ placement_provider: 'compute-1_0000:3D:00.0' });
    expect(v.last_cleanup).toMatchObject({ job_id: 'job-1', outcome: 'succeeded' });
  });
});
