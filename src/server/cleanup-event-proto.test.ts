/** The proof, with the agent's census of the media, between its record and its wire form. */
import { describe, expect, it } from 'vitest';
import { NamespaceManagement, ReadBack } from '../gen/berth/agent/v1/cleanup_proof.js';
import type { CleanupProof } from '../plugins/cleanup-evidence.js';
import { proofFromProto, proofToProto } from './cleanup-event-proto.js';

const MIB = 1024 * 1024;

const proof: CleanupProof = {
  method: 'read-back',
  readBack: 'full',
  bytesWritten: 3 * MIB,
  bytesRead: 3 * MIB,
  bytesTotal: 3 * MIB,
  findings: ['nvme0n1: all 3145728 bytes read back as zero'],
  census: {
    controller: 'nvme1',
    totalCapacity: null,
    unallocatedCapacity: null,
    namespaces: [
      {
        nsid: 1,
        sizeBytes: 2 * MIB,
        blockSize: 512,
        attached: true,
        name: 'nvme0n1',
        coveredBy: 'read-back',
      },
      { nsid: 2, sizeBytes: MIB, blockSize: 4096, attached: true, name: 'nvme0n2', coveredBy: 'read-back' },
    ],
    namespacesBefore: [
      { nsid: 1, sizeBytes: 2 * MIB, blockSize: 512, attached: true, name: 'nvme0n1' },
      { nsid: 2, sizeBytes: MIB, blockSize: 4096, attached: false, name: '' },
    ],
    namespaceManagement: 'refused',
    unallocated: 'capacity unknown (TNVMCAP 0), and namespace management was refused',
  },
};

describe('proof on the wire', () => {
  it('carries the census, with an unknown capacity left absent, and comes back unchanged', () => {
    const wire = proofToProto(proof);
    expect(wire.readBack).toBe(ReadBack.READ_BACK_FULL);
    expect(wire.census).toMatchObject({
      controller: 'nvme1',
      namespaceManagement: NamespaceManagement.NAMESPACE_MANAGEMENT_REFUSED,
      namespacesBefore: [
        { nsid: 1, coveredBy: '' },
        { nsid: 2, attached: false },
      ],
    });
    expect(wire.census && 'totalCapacityBytes' in wire.census).toBe(false);
    expect(proofFromProto(wire)).toEqual(proof);
    const known = { ...proof, census: { ...proof.census!, totalCapacity: 8 * MIB, unallocatedCapacity: 0 } };
    expect(proofToProto(known).census).toMatchObject({
      totalCapacityBytes: 8 * MIB,
      unallocatedCapacityBytes: 0,
    });
    expect(proofFromProto(proofToProto(known))).toEqual(known);
  });

  it('a proof without a census (a plain PCI function, an older agent) stays without one', () => {
    const { census: _c, ...plain } = proof;
    expect(proofToProto(plain).census).toBeUndefined();
    expect(proofFromProto(proofToProto(plain))).toEqual(plain);
  });
});
