/**
 * How a device the kubelet allocates is held in the scheduler, and let go
 * (decision 74): through the scheduler's own accelerator request API, like
 * any bind. Per device, an ARQ of the resource class's profile
 * (`k8s-<class>`, made when missing) is bound to an instance named after the
 * allocation, on this host, restricted to that very device (device_uuids).
 * The scheduler refuses a device that is not allocatable, and before it
 * acknowledges, this agent records the binding in its journal
 * (RecordBinding): the tenancy is durable before Allocate answers. The
 * release deletes the ARQ: pending_cleaning → the agent's scrub with proof →
 * certificate → available, as every other release.
 */
import { type ChannelCredentials, credentials, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { BerthError, failedPrecondition } from '../../../errors.js';
import { AcceleratorRequestServiceClient } from '../../../gen/berth/scheduler/v1/accelerator_request.js';
import { DeviceServiceClient } from '../../../gen/berth/scheduler/v1/device_service.js';
import { LiveMigratable, ProfileServiceClient } from '../../../gen/berth/scheduler/v1/profile.js';
import type { MediaRecord } from '../../../plugins/types.js';
import { CHANNEL_OPTIONS } from '../../../transport/channel.js';

/** A device held in the scheduler for a pod's allocation. */
export interface Hold {
  arqUuid: string;
  instance: string;
}

/** A device a kubelet request wants held: for `instance`, with `requestId` as the ARQ's idempotency key. */
export interface Wanted {
  address: string;
  cls: string;
  instance: string;
  requestId?: string;
}

type Callback<T> = (err: ServiceError | null, res?: T) => void;

export class SchedulerHolds {
  private readonly arqs: InstanceType<typeof AcceleratorRequestServiceClient>;
  private readonly devices: InstanceType<typeof DeviceServiceClient>;
  private readonly profiles: InstanceType<typeof ProfileServiceClient>;

  constructor(
    address: string,
    private readonly host: string,
    creds: ChannelCredentials | undefined,
    private readonly token: string | undefined,
    private readonly timeoutMs = 15_000,
  ) {
    const c = creds ?? credentials.createInsecure();
    this.arqs = new AcceleratorRequestServiceClient(address, c, CHANNEL_OPTIONS);
    this.devices = new DeviceServiceClient(address, c, CHANNEL_OPTIONS);
    this.profiles = new ProfileServiceClient(address, c, CHANNEL_OPTIONS);
  }

  private call<Req, Res>(
    fn: (req: Req, md: Metadata, opts: { deadline: number }, cb: Callback<Res>) => unknown,
    req: Req,
  ): Promise<Res> {
    const md = new Metadata();
    if (this.token) md.set('authorization', `Bearer ${this.token}`);
    return new Promise((resolve, reject) => {
      fn(req, md, { deadline: Date.now() + this.timeoutMs }, (err, res) =>
        err || !res ? reject(err) : resolve(res),
      );
    });
  }

  /** The profile the device plugin's ARQs of `cls` are made from: one device of the class. */
  private async profileFor(cls: string): Promise<string> {
    const name = `k8s-${cls.toLowerCase().replace(/_/g, '-')}`.slice(0, 64);
    try {
      await this.call(this.profiles.getProfile.bind(this.profiles), { name });
    } catch (err) {
      if ((err as ServiceError).code !== status.NOT_FOUND) throw err;
      await this.call(this.profiles.createProfile.bind(this.profiles), {
        profile: {
          name,
          uuid: '',
          description: `one ${cls} device, for the kubelet's device plugin (docs/kubernetes.md)`,
          groups: [
            {
              resourceClass: cls,
              vendorId: '',
              productId: '',
              requiredTraits: [],
              forbiddenTraits: [],
              liveMigratable: LiveMigratable.LIVE_MIGRATABLE_UNSPECIFIED,
              count: 1,
            },
          ],
          createdAt: undefined,
        },
      });
    }
    return name;
  }

  /**
   * Binds the device at `address` (of class `cls`) to `instance`; the
   * scheduler's refusal (not allocatable, its agent did not record it) is
   * FAILED_PRECONDITION naming the device. `requestId` (default `instance`)
   * is the idempotency key: the same one again gives the same ARQ.
   */
  async hold(address: string, cls: string, instance: string, requestId = instance): Promise<Hold> {
    const where = `device ${address} on host ${this.host}`;
    try {
      const profileName = await this.profileFor(cls);
      const device = await this.call(this.devices.getDevice.bind(this.devices), {
        device: { ref: { $case: 'hostAddress', value: { host: this.host, address } } },
      });
      const created = await this.call(this.arqs.createAcceleratorRequests.bind(this.arqs), {
        profileName,
        requestId,
        tags: [],
      });
      const arqUuid = created.acceleratorRequests[0]!.uuid;
      try {
        await this.call(this.arqs.bindAcceleratorRequests.bind(this.arqs), {
          bindings: [
            { arqUuid, instanceUuid: instance, host: this.host, tag: '', deviceUuids: [device.device!.uuid] },
          ],
        });
      } catch (err) {
        // Nothing stays of a refused bind: the unbound ARQ goes too.
        await this.release(arqUuid).catch(() => {});
        throw err;
      }
      return { arqUuid, instance };
    } catch (err) {
      const e = err as ServiceError;
      if (e.code === status.UNAVAILABLE || e.code === status.DEADLINE_EXCEEDED) {
        throw new BerthError(
          'UNAVAILABLE',
          `${where}: the scheduler did not answer (${e.details || e.message}); the kubelet retries the pod`,
          { reason: 'SCHEDULER_UNAVAILABLE', metadata: { address, host: this.host } },
        );
      }
      throw failedPrecondition(
        'DEVICE_NOT_ALLOCATABLE',
        `${where}: the scheduler did not hold it for this pod: ${e.details || e.message}`,
        { address, host: this.host },
      );
    }
  }

  /**
   * Holds every device of one kubelet request, or none: each is bound in the
   * scheduler (./hold), then the agent's own journal must record that very
   * hold (the scheduler acknowledged only after RecordBinding); on any
   * failure, what was held is released and the error thrown.
   */
  async holdAll(
    wanted: readonly Wanted[],
    recorded: (address: string) => MediaRecord | undefined,
  ): Promise<Hold[]> {
    const held: Hold[] = [];
    try {
      for (const w of wanted) {
        const hold = await this.hold(w.address, w.cls, w.instance, w.requestId);
        held.push(hold);
        const rec = recorded(w.address);
        if (rec?.condition !== 'held' || rec.arqUuid !== hold.arqUuid) {
          throw failedPrecondition(
            'DEVICE_NOT_ALLOCATABLE',
            `device ${w.address}: the journal does not record its hold for ${w.instance}`,
            { address: w.address },
          );
        }
      }
    } catch (err) {
      for (const h of held) await this.release(h.arqUuid).catch(() => {});
      throw err instanceof BerthError ? err : BerthError.from(err);
    }
    return held;
  }

  /** Deletes the hold's ARQ: the device goes through Berth's release (deleting what is gone is a no-op). */
  async release(arqUuid: string): Promise<void> {
    await this.call(this.arqs.deleteAcceleratorRequests.bind(this.arqs), {
      uuids: [arqUuid],
      instanceUuid: '',
    });
  }

  close(): void {
    this.arqs.close();
    this.devices.close();
    this.profiles.close();
  }
}
