/**
 * The catalogue of error reasons: every `google.rpc.ErrorInfo` reason Berth
 * sends (and the `berth-error-reason` trailer), with the status code it comes
 * with and a one-line meaning. A BerthError takes only a reason listed here,
 * and only with a code listed for it, so a new reason is a new line in this
 * table, and `docs/api.md`'s table of reasons is held equal to it by a test
 * (error-reasons.test.ts).
 */

export type ErrorCode =
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'ALREADY_EXISTS'
  | 'FAILED_PRECONDITION'
  | 'ABORTED'
  | 'RESOURCE_EXHAUSTED'
  | 'PERMISSION_DENIED'
  | 'UNAUTHENTICATED'
  | 'UNAVAILABLE'
  | 'DEADLINE_EXCEEDED'
  | 'CANCELLED'
  | 'INTERNAL';

interface ReasonEntry {
  readonly codes: readonly ErrorCode[];
  readonly meaning: string;
}

export const ERROR_REASONS = {
  // --- unknown ids (NOT_FOUND; the id is in the metadata) ---------------------
  DEVICE_NOT_FOUND: {
    codes: ['NOT_FOUND'],
    meaning: 'No device has that uuid, or that address on that host.',
  },
  HOST_NOT_FOUND: { codes: ['NOT_FOUND'], meaning: 'No host has registered under that name.' },
  PROFILE_NOT_FOUND: { codes: ['NOT_FOUND'], meaning: 'No device profile has that name.' },
  ACCELERATOR_REQUEST_NOT_FOUND: {
    codes: ['NOT_FOUND'],
    meaning: 'No accelerator request (ARQ) has that uuid.',
  },
  INSTANCE_NOT_FOUND: { codes: ['NOT_FOUND'], meaning: 'No accelerator request is bound to that instance.' },
  CLEANUP_JOB_NOT_FOUND: {
    codes: ['NOT_FOUND'],
    meaning: 'No cleanup job has that id (or it was removed by retention).',
  },
  MIGRATION_NOT_FOUND: { codes: ['NOT_FOUND'], meaning: 'No live migration has that uuid.' },
  NO_CLEANUP: {
    codes: ['NOT_FOUND'],
    meaning: 'The CLI was asked to follow the cleanup of a device that has never been cleaned.',
  },

  // --- device state -----------------------------------------------------------
  DEVICE_NOT_ALLOCATABLE: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The device cannot be bound now; the message lists why (state, status, health, media, host).',
  },
  DEVICE_ALLOCATED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The device is bound to an ARQ; release it first.',
  },
  DEVICE_ALREADY_CLEAN: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The device is available and holds no tenant data: there is nothing to clean.',
  },
  DEVICE_BURNED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'A one-time-use device was used once and is never offered or cleaned again.',
  },
  DEVICE_HOLDS_TENANT_DATA: {
    codes: ['FAILED_PRECONDITION'],
    meaning:
      "The device (or its media) still holds a tenant's data, so the operation would hand it on or lose track of it.",
  },
  DEVICE_NOT_CLAIMED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'A migration step names a destination device the migration did not claim.',
  },
  DEVICE_NOT_HELD: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The device is not allocated to the ARQ or migration that asked to release it.',
  },
  DEVICE_NOT_LIVE_MIGRATABLE: {
    codes: ['FAILED_PRECONDITION'],
    meaning: "A bound device's device_spec no longer allows live migration.",
  },
  GENERATION_CONFLICT: {
    codes: ['ABORTED'],
    meaning: 'The generation sent is not the current one: read the record again and retry.',
  },
  CONCURRENT_UPDATE: {
    codes: ['ABORTED'],
    meaning: 'The record changed while it was being written (another replica or call); retry.',
  },

  // --- cleaning ---------------------------------------------------------------
  CLEANING_NOT_SUPPORTED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: "The device's driver cannot clean it (no cleanup action for it).",
  },
  CLEANUP_IN_PROGRESS: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'A cleanup of the device is running already.',
  },
  CLEANUP_NOT_EXPECTED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'A cleanup result arrived for a device that is not being cleaned.',
  },
  STALE_CLEANUP_JOB: {
    codes: ['FAILED_PRECONDITION'],
    meaning: "A cleanup result names a job that is not the device's current one.",
  },
  CLEANUP_FAILED: {
    codes: ['INTERNAL'],
    meaning: 'A cleanup command failed; the device is in error with the cause.',
  },
  CLEANUP_TIMED_OUT: {
    codes: ['DEADLINE_EXCEEDED'],
    meaning: 'The cleanup did not finish within its deadline.',
  },
  CLEANUP_ABORTED: {
    codes: ['CANCELLED'],
    meaning: 'The cleanup was stopped (agent stopping, job cancelled) before it finished.',
  },
  AGENT_CANNOT_CLEAN: {
    codes: ['FAILED_PRECONDITION'],
    meaning: "The host's agent does not offer cleaning (too old, or no driver that cleans the device).",
  },
  MEDIA_UNKNOWN: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The device has no media identity yet (not discovered since start); rediscover it.',
  },
  MEDIA_CHANGED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The media at that address is not the media the request names (a drive moved or was swapped).',
  },
  MEDIA_NOT_FOUND: {
    codes: ['NOT_FOUND'],
    meaning: 'The scheduler has no record of a media with that key.',
  },
  MEDIA_PRESENT: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'A host presents the media now (or a device of it is in use): it is not forgotten.',
  },
  MEDIA_RECORDS_OVER_LIMIT: {
    codes: ['RESOURCE_EXHAUSTED'],
    meaning:
      "A registration carries more media records than one may, or would make the scheduler keep more of the host's reported media than its bound; none was stored.",
  },
  MEDIA_NOT_CLEAN: {
    codes: ['FAILED_PRECONDITION'],
    meaning:
      "The agent's journal does not know the media as clean, so it will not hand it out without a cleanup.",
  },

  // --- ARQs and binding -------------------------------------------------------
  NO_ALLOCATABLE_DEVICE: {
    codes: ['FAILED_PRECONDITION'],
    meaning: "No device on the host matches the profile's request and is allocatable.",
  },
  ARQ_ALREADY_BOUND: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The ARQ is bound to another device or instance.',
  },
  ARQ_BIND_RUNNING: {
    codes: ['FAILED_PRECONDITION'],
    meaning:
      'A bind of the ARQ through the Cyborg API is running (on this scheduler or another of its database): a second Cyborg bind or unbind of it, or a `BindAcceleratorRequests` of it, is refused; retry once it ended.',
  },
  ARQ_NOT_BOUND: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The ARQ is not bound, so it has no device to act on.',
  },
  ARQ_STATE_CONFLICT: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The ARQ cannot move from its current state to the one asked for.',
  },
  INSTANCE_NOT_BOUND: { codes: ['FAILED_PRECONDITION'], meaning: 'The instance has no bound ARQ.' },
  AGENT_CANNOT_RECORD_BINDINGS: {
    codes: ['FAILED_PRECONDITION'],
    meaning:
      "The host's agent is too old to record bindings in its journal; upgrade it before binding there.",
  },
  AGENT_REFUSED_BINDING: {
    codes: ['FAILED_PRECONDITION'],
    meaning:
      'The agent refused to record the binding (the device is not there, or its media holds tenant data).',
  },
  AGENT_REFUSED_RELEASE: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The agent refused to record the release.',
  },
  GUEST_ADDRESS_CONFLICT: {
    codes: ['FAILED_PRECONDITION'],
    meaning: "Two devices would take the same slot in the guest's PCI topology.",
  },
  GUEST_PCI_BUS_FULL: {
    codes: ['RESOURCE_EXHAUSTED'],
    meaning: "The guest's PCI bus has no free slot for another device.",
  },

  // --- migration --------------------------------------------------------------
  PROFILE_NOT_LIVE_MIGRATABLE: {
    codes: ['FAILED_PRECONDITION'],
    meaning: "The instance's profile does not ask for live-migratable devices.",
  },
  MIGRATION_IN_PROGRESS: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The instance has a live migration in progress already.',
  },
  MIGRATION_NOT_PLANNED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The migration is not in the planned state.',
  },
  MIGRATION_NOT_PREPARED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The migration was not prepared on the destination.',
  },
  MIGRATION_PREPARE_FAILED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The destination agent refused to prepare the migration; its claims were released.',
  },
  MIGRATION_DEVICE_NOT_READY: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'A destination device is not ready for the migration (the message says which and why).',
  },
  AGENT_CANNOT_MIGRATE: {
    codes: ['FAILED_PRECONDITION'],
    meaning:
      "The destination agent is too old to prepare live migrations; the migration's claims were released.",
  },

  // --- hosts and agents -------------------------------------------------------
  HOST_CONNECTED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: "The host's agent is connected; stop it first.",
  },
  HOST_HAS_DEVICES_IN_USE: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The host has devices bound or holding tenant data; it cannot be deleted.',
  },
  PRINCIPAL_NOT_FOR_HOST: {
    codes: ['PERMISSION_DENIED'],
    meaning: "The caller's credential speaks for another host (or for none).",
  },
  HOST_PINNED_TO_ANOTHER_PRINCIPAL: {
    codes: ['PERMISSION_DENIED'],
    meaning: 'The host was first registered by another principal; delete the host to re-pin it.',
  },
  AGENT_KEY_CHANGED: {
    codes: ['FAILED_PRECONDITION'],
    meaning:
      'The agent signs with a key other than the one pinned for its host; an admin pins a new one (berth host rotate-key).',
  },
  AGENT_KEY_RETIRED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The agent signs with a key an admin retired for its host; it must make a new one.',
  },
  NOT_INSTANCE_OWNER: {
    codes: ['PERMISSION_DENIED'],
    meaning:
      "The caller asked for another principal's instance (erasure certificates of its own instances only).",
  },
  AGENT_UNAVAILABLE: {
    codes: ['UNAVAILABLE'],
    meaning:
      "The host's agent could not be reached for the step; nothing was left half-done (a bind undone, a migration's claims released): retry.",
  },
  SCHEDULER_UNAVAILABLE: {
    codes: ['UNAVAILABLE'],
    meaning:
      'The agent could not reach the scheduler to hold a device the kubelet asked for (device plugin Allocate); nothing is held: the kubelet retries.',
  },
  AGENT_FAILURE: {
    codes: ['INTERNAL'],
    meaning: 'The agent failed in a way it could not classify (a bug); see its log.',
  },
  INSTANCE_RUNNING: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'Another agent or scheduler process already uses that state directory or database.',
  },

  // --- requests, watches and retention -----------------------------------------
  REQUEST_ID_SPENT: {
    codes: ['FAILED_PRECONDITION'],
    meaning:
      'The request_id already made a record that no longer exists; send the request again with a new request_id.',
  },
  REVISION_COMPACTED: {
    codes: ['FAILED_PRECONDITION'],
    meaning:
      'The watch asked to resume from a revision retention has removed; list again and watch from the list.',
  },

  // --- Placement ----------------------------------------------------------------
  PLACEMENT_NOT_CONFIGURED: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The scheduler runs without a Placement endpoint.',
  },
  PLACEMENT_UNREACHABLE: {
    codes: ['UNAVAILABLE'],
    meaning: 'Placement did not answer, or answered with a server error.',
  },
  PLACEMENT_INCOMPATIBLE: {
    codes: ['FAILED_PRECONDITION'],
    meaning:
      "Placement's inventory conflicts with Berth's (a provider of the same name owned by another service, too old a microversion).",
  },

  // --- authentication and authorization -----------------------------------------
  CREDENTIALS_MISSING: { codes: ['UNAUTHENTICATED'], meaning: 'The call carried no credential.' },
  CREDENTIALS_INVALID: {
    codes: ['UNAUTHENTICATED'],
    meaning: 'The credential is unknown, malformed, expired or badly signed.',
  },
  ROLE_NOT_ALLOWED: {
    codes: ['PERMISSION_DENIED'],
    meaning: 'The caller is known but has no role the method allows (or its token names roles ambiguously).',
  },

  // --- listening and storage ------------------------------------------------------
  ADDRESS_IN_USE: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The listen address is taken by another process.',
  },
  ADDRESS_NOT_AVAILABLE: {
    codes: ['FAILED_PRECONDITION'],
    meaning: 'The listen address is not on this machine.',
  },
  ADDRESS_NOT_ALLOWED: { codes: ['PERMISSION_DENIED'], meaning: 'The process may not listen on that port.' },
  STORE_UNAVAILABLE: { codes: ['UNAVAILABLE'], meaning: "The scheduler's database does not answer." },
  STORE_DAMAGED: {
    codes: ['UNAVAILABLE'],
    meaning: 'The database file is damaged; restore it or start from an empty one.',
  },
  STORE_DISK_FULL: { codes: ['RESOURCE_EXHAUSTED'], meaning: 'The disk of the database or journal is full.' },
  STORE_IO_ERROR: {
    codes: ['UNAVAILABLE'],
    meaning: 'The database or journal cannot be read or written (I/O error, read-only).',
  },
} as const satisfies Record<string, ReasonEntry>;

export type ErrorReason = keyof typeof ERROR_REASONS;

/** The reasons that may come with `code`. */
export type ReasonFor<C extends ErrorCode> = {
  [R in ErrorReason]: C extends (typeof ERROR_REASONS)[R]['codes'][number] ? R : never;
}[ErrorReason];

export const isErrorReason = (s: string): s is ErrorReason => Object.hasOwn(ERROR_REASONS, s);

/**
 * A reason another process sent (an agent's refusal relayed by the
 * scheduler), kept when the catalogue lists it for `code`, else `fallback`.
 */
export function relayedReason<C extends ErrorCode>(
  code: C,
  sent: string | undefined,
  fallback: ReasonFor<C>,
): ReasonFor<C>;
/** Without a fallback: undefined when the catalogue does not list `sent` for `code`. */
export function relayedReason<C extends ErrorCode>(
  code: C,
  sent: string | undefined,
): ReasonFor<C> | undefined;
export function relayedReason<C extends ErrorCode>(
  code: C,
  sent: string | undefined,
  fallback?: ReasonFor<C>,
): ReasonFor<C> | undefined {
  if (sent && isErrorReason(sent) && (ERROR_REASONS[sent].codes as readonly ErrorCode[]).includes(code)) {
    return sent as ReasonFor<C>;
  }
  return fallback;
}

/** The trailer that repeats a Berth error's ErrorInfo reason in plain text (src/transport/status.ts). */
export const REASON_TRAILER = 'berth-error-reason';
