/**
 * Authentication and authorization for every Berth gRPC server, in ONE server
 * interceptor driven by ONE table (METHOD_ROLES: fully-qualified method → the
 * roles allowed to call it).
 *
 * A caller proves who it is with a bearer token in the `authorization`
 * metadata — a JWT signed by a configured key (HS256 secret, RSA/EC/Ed25519
 * public key, or a JWKS file), or a static token listed in a file — or, with
 * mutual TLS, with a client certificate whose subject CN is mapped to a role.
 * No valid credential → UNAUTHENTICATED; a valid one without an allowed role →
 * PERMISSION_DENIED. A method missing from the table is refused for everyone
 * (fail closed), and a test walks every method the servers register so a new
 * RPC without an entry fails CI.
 *
 * Health and reflection are open: load balancers and orchestrators probe
 * health without credentials, and reflection exposes only the public .proto
 * schema (which is in the repository anyway); neither touches device state.
 *
 * Auth is off only when configured `{ mode: 'none' }`, and then the server
 * logs a warning at start.
 *
 * This module holds the policy: the roles and THE table. The rest of auth:
 * configuration.ts (what is configured, read from files), authenticator.ts
 * (checks a credential against it), interceptor.ts (the one server
 * interceptor), tokens.ts (issuing credentials).
 */

/**
 * - admin: operators. Everything, including the destructive or
 *   tenant-safety-relevant actions (clean, release, enable/disable, profile writes).
 * - service: the orchestration layer (Nova-like): reads, ARQs, instances, migrations.
 * - reader: dashboards and monitoring: read-only.
 * - agent: host agents; only Register on the scheduler. A stolen agent token
 *   cannot create ARQs, read other hosts' bindings or clean devices.
 * - scheduler: the scheduler calling agents (inventory, cleanup, migration prep).
 * - host-client: a host's kubelet device plugin and DRA driver (decision 90):
 *   exactly the calls they make, for their own host only (the token's subject
 *   names the host, as an agent's does). The table lets the calls through; the
 *   handlers refuse another host's device or ARQ (domain/host.ts `hostClientOf`).
 *   No profile writes: the plugin's profiles are made beforehand by an admin.
 */
export const ROLES = ['admin', 'service', 'reader', 'agent', 'scheduler', 'host-client'] as const;
export type Role = (typeof ROLES)[number];

const A: Role = 'admin';
const SV: Role = 'service';
const R: Role = 'reader';
const AG: Role = 'agent';
const SC: Role = 'scheduler';
const HC: Role = 'host-client';

const S = 'berth.scheduler.v1';
const AGENT = 'berth.agent.v1.AgentService';

/** THE table. Keys are `package.Service/Method`; every served method must have an entry. */
export const METHOD_ROLES: Readonly<Record<string, readonly Role[]>> = {
  [`${S}.RegistrationService/Register`]: [A, AG],

  [`${S}.HostService/ListHosts`]: [A, SV, R],
  [`${S}.HostService/GetHost`]: [A, SV, R],
  [`${S}.HostService/DeleteHost`]: [A],

  [`${S}.DeviceService/ListDevices`]: [A, SV, R],
  [`${S}.DeviceService/GetDevice`]: [A, SV, R, HC],
  [`${S}.DeviceService/WatchDevices`]: [A, SV, R],
  [`${S}.DeviceService/WatchCleanup`]: [A, SV, R],
  [`${S}.DeviceService/CleanDevice`]: [A],
  [`${S}.DeviceService/ReleaseDevice`]: [A],
  [`${S}.DeviceService/SetDeviceStatus`]: [A],
  [`${S}.DeviceService/ForgetMedia`]: [A],

  [`${S}.ProfileService/CreateProfile`]: [A],
  [`${S}.ProfileService/DeleteProfile`]: [A],
  [`${S}.ProfileService/GetProfile`]: [A, SV, R, HC],
  [`${S}.ProfileService/ListProfiles`]: [A, SV, R],

  [`${S}.AcceleratorRequestService/CreateAcceleratorRequests`]: [A, SV, HC],
  [`${S}.AcceleratorRequestService/BindAcceleratorRequests`]: [A, SV, HC],
  [`${S}.AcceleratorRequestService/DeleteAcceleratorRequests`]: [A, SV, HC],
  [`${S}.AcceleratorRequestService/GetAcceleratorRequest`]: [A, SV, R],
  [`${S}.AcceleratorRequestService/ListAcceleratorRequests`]: [A, SV, R],

  [`${S}.InstanceService/GetInstanceXml`]: [A, SV, R],
  [`${S}.InstanceService/SetInstanceDevices`]: [A, SV],
  [`${S}.InstanceService/GetDeviceMetadata`]: [A, SV, R],

  [`${S}.MigrationService/PlanLiveMigration`]: [A, SV],
  [`${S}.MigrationService/CommitMigration`]: [A, SV],
  [`${S}.MigrationService/AbortMigration`]: [A, SV],

  [`${S}.PlacementService/GetPlacementStatus`]: [A, SV, R],
  [`${S}.PlacementService/SyncPlacement`]: [A],

  // Service callers see only their own instances' certificates (app/certificates.ts).
  [`${S}.CertificateService/ListErasureCertificates`]: [A, SV, R],
  [`${S}.CertificateService/ListAgentKeys`]: [A, SV, R],
  [`${S}.CertificateService/RotateAgentKey`]: [A],

  [`${AGENT}/GetAgentInfo`]: [A, SC, R],
  [`${AGENT}/ListDevices`]: [A, SC, R],
  [`${AGENT}/WatchInventory`]: [A, SC, R],
  [`${AGENT}/Rediscover`]: [A, SC],
  [`${AGENT}/CleanupDevice`]: [A, SC],
  [`${AGENT}/PrepareMigration`]: [A, SC],
  [`${AGENT}/RecordBinding`]: [A, SC],
  [`${AGENT}/ReleaseDevice`]: [A, SC],
};

/** Services anyone may call (see the module comment for why). */
export const OPEN_SERVICES: readonly string[] = [
  'grpc.health.v1.Health',
  'grpc.reflection.v1.ServerReflection',
  'grpc.reflection.v1alpha.ServerReflection',
];

/** `/pkg.Service/Method` (a grpc-js path) → `pkg.Service/Method`. */
export function methodKey(path: string): string {
  return path.startsWith('/') ? path.slice(1) : path;
}

export function isOpenMethod(path: string): boolean {
  const key = methodKey(path);
  return OPEN_SERVICES.some((s) => key.startsWith(`${s}/`));
}

/** Roles allowed on a method, or undefined when the table has no entry (then nobody may call it). */
export function allowedRoles(path: string): readonly Role[] | undefined {
  return METHOD_ROLES[methodKey(path)];
}

export function isRole(v: unknown): v is Role {
  return typeof v === 'string' && (ROLES as readonly string[]).includes(v);
}
