/**
 * A kubelet stand-in, built from the kubelet's own protos (proto/k8s.io,
 * vendored unmodified): it serves `Registration` on
 * `<dir>/device-plugins/kubelet.sock` and `PodResourcesLister` on
 * `<dir>/pod-resources/kubelet.sock`, records every registration, reports the
 * pods a test says hold devices, and dials a plugin's endpoint as the kubelet
 * does. A restart removes the directory's sockets (as the kubelet does) and
 * makes its own again.
 */
import { mkdir, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { credentials, Server, ServerCredentials, status } from '@grpc/grpc-js';
import {
  DevicePluginClient,
  type RegisterRequest,
  type RegistrationServer,
  RegistrationService,
} from '../../src/gen/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.js';
import {
  type PodResourcesListerServer,
  PodResourcesListerService,
} from '../../src/gen/k8s.io/kubelet/pkg/apis/podresources/v1/api.js';
import { tempDir } from './agent.js';

/** A pod's devices: resource name → device ids. */
export type PodDevices = Record<string, string[]>;

export class KubeletStandIn {
  readonly registrations: RegisterRequest[] = [];
  /** Pod name → its devices, as pod-resources reports them. */
  readonly pods = new Map<string, PodDevices>();
  /** pod-resources answers (false: UNAVAILABLE, as a kubelet that is going down). */
  podResourcesUp = true;
  private registration: Server | null = null;
  private podResources: Server | null = null;

  private constructor(
    readonly dir: string,
    private readonly cleanup: () => Promise<void>,
  ) {}

  static async start(): Promise<KubeletStandIn> {
    const d = await tempDir('berth-kubelet-');
    const k = new KubeletStandIn(d.path, d.cleanup);
    await mkdir(k.pluginDir, { recursive: true });
    await mkdir(join(d.path, 'pod-resources'), { recursive: true });
    await k.startRegistration();
    k.podResources = await serve(join(d.path, 'pod-resources', 'kubelet.sock'), (s) =>
      s.addService(PodResourcesListerService, {
        list: (_call, cb) => {
          if (!k.podResourcesUp) {
            cb({ code: status.UNAVAILABLE, details: 'the kubelet is going down' });
            return;
          }
          cb(null, {
            podResources: [...k.pods].map(([name, devices]) => ({
              name,
              namespace: 'default',
              cpuIds: [],
              memory: [],
              dynamicResources: [],
              containers: [
                {
                  name: 'compute',
                  cpuIds: [],
                  memory: [],
                  dynamicResources: [],
                  devices: Object.entries(devices).map(([resourceName, deviceIds]) => ({
                    resourceName,
                    deviceIds,
                    topology: undefined,
                  })),
                },
              ],
            })),
          });
        },
        getAllocatableResources: (_c, cb) =>
          cb({ code: status.UNIMPLEMENTED, details: 'not in the stand-in' }),
        get: (_c, cb) => cb({ code: status.UNIMPLEMENTED, details: 'not in the stand-in' }),
      } satisfies PodResourcesListerServer),
    );
    return k;
  }

  get pluginDir(): string {
    return join(this.dir, 'device-plugins');
  }

  get podResourcesSocket(): string {
    return join(this.dir, 'pod-resources', 'kubelet.sock');
  }

  private async startRegistration(): Promise<void> {
    this.registration = await serve(join(this.pluginDir, 'kubelet.sock'), (s) =>
      s.addService(RegistrationService, {
        register: (call, cb) => {
          this.registrations.push(call.request);
          cb(null, {});
        },
      } satisfies RegistrationServer),
    );
  }

  /** The kubelet restarts: its sockets and the plugins' go, and a new kubelet.sock is made. */
  async restart(): Promise<void> {
    this.registration?.forceShutdown();
    for (const f of await readdir(this.pluginDir)) await unlink(join(this.pluginDir, f)).catch(() => {});
    await this.startRegistration();
  }

  /** A client of the plugin that registered `endpoint`, as the kubelet dials it. */
  plugin(endpoint: string): InstanceType<typeof DevicePluginClient> {
    return new DevicePluginClient(`unix://${join(this.pluginDir, endpoint)}`, credentials.createInsecure());
  }

  async stop(): Promise<void> {
    this.registration?.forceShutdown();
    this.podResources?.forceShutdown();
    await this.cleanup();
  }
}

async function serve(path: string, add: (s: Server) => void): Promise<Server> {
  await unlink(path).catch(() => {});
  const s = new Server();
  add(s);
  await new Promise<void>((resolve, reject) =>
    s.bindAsync(`unix://${path}`, ServerCredentials.createInsecure(), (err) =>
      err ? reject(err) : resolve(),
    ),
  );
  return s;
}
