/**
 * What a ResourceClaim allocates to Berth (issue 39, decision 75). The
 * kubelet's NodePrepareResources carries only the claim's reference
 * (namespace, name, uid); the devices the scheduler allocated are in the
 * claim's `status.allocation.devices.results` on the API server, read here
 * with Kubernetes' own client library. Only results of Berth's driver and of
 * this host's pool are Berth's; the others belong to other drivers.
 */
import type { ResourceV1Api } from '@kubernetes/client-node';

/** A claim as the kubelet names it. */
export interface ClaimRef {
  namespace: string;
  name: string;
  uid: string;
}

/** One allocation result that is Berth's. */
export interface ClaimResult {
  request: string;
  pool: string;
  device: string;
}

/** Why a claim cannot be prepared (the kubelet's per-claim error; it retries). */
export class ClaimProblem extends Error {}

export class ClaimReader {
  constructor(
    private readonly api: ResourceV1Api,
    private readonly driver: string,
    private readonly pool: string,
  ) {}

  /** The results of `ref`'s allocation that are Berth's on this host; a ClaimProblem says why none can be known. */
  async results(ref: ClaimRef): Promise<ClaimResult[]> {
    const what = `ResourceClaim ${ref.namespace}/${ref.name}`;
    let claim: Awaited<ReturnType<ResourceV1Api['readNamespacedResourceClaim']>>;
    try {
      claim = await this.api.readNamespacedResourceClaim({ namespace: ref.namespace, name: ref.name });
    } catch (err) {
      // client-node's ApiException carries the HTTP status as `code` (matched by shape: the library is loaded lazily).
      const code = (err as { code?: unknown }).code;
      if (code === 404) throw new ClaimProblem(`${what} is not on the API server`);
      const why = typeof code === 'number' ? `HTTP ${code}` : (err as Error).message;
      throw new ClaimProblem(`cannot read ${what} from the API server: ${why}`);
    }
    const uid = claim.metadata?.uid ?? '';
    if (uid !== ref.uid) {
      // The name now belongs to another claim (deleted and made again): not the one the kubelet means.
      throw new ClaimProblem(`${what} has uid ${JSON.stringify(uid)}, not ${JSON.stringify(ref.uid)}`);
    }
    const allocation = claim.status?.allocation;
    if (!allocation) throw new ClaimProblem(`${what} is not allocated (no status.allocation)`);
    return (allocation.devices?.results ?? [])
      .filter((r) => r.driver === this.driver && r.pool === this.pool)
      .map((r) => ({ request: r.request, pool: r.pool, device: r.device }));
  }
}
