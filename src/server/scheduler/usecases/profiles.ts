/** Use cases: device profiles. */

import { randomUUID } from 'node:crypto';
import { BerthError } from '../../../errors.js';
import { type Profile, type ProfileSpec, sameProfileSpec } from '../domain/profile.js';
import { read, type UseCaseDeps } from './context.js';
import { mustProfile } from './records.js';
import { write } from './unit.js';
import { FOR_UPDATE } from './unit-of-work.js';

/** Idempotent on an identical spec; ALREADY_EXISTS for a different one under the name. */
export async function createProfile(deps: UseCaseDeps, spec: ProfileSpec): Promise<Profile> {
  return write(deps, async (tx) => {
    const prev = await tx.uow.profile(spec.name, FOR_UPDATE);
    if (prev && prev.name === spec.name) {
      if (sameProfileSpec(prev, spec)) return prev;
      throw new BerthError('ALREADY_EXISTS', `profile "${spec.name}" already exists with different groups`, {
        metadata: { kind: 'profile', id: spec.name },
      });
    }
    const p: Profile = { ...spec, uuid: randomUUID(), createdAt: tx.now() };
    await tx.uow.insertProfile(p);
    return p;
  });
}

/** By name or uuid. */
export async function getProfile(deps: UseCaseDeps, nameOrUuid: string): Promise<Profile> {
  return read(deps, (r) => mustProfile(r, nameOrUuid));
}

export async function listProfiles(deps: UseCaseDeps): Promise<Profile[]> {
  return read(deps, (r) => r.profiles());
}

/** false when there was nothing to delete. */
export async function deleteProfile(deps: UseCaseDeps, name: string): Promise<boolean> {
  return write(deps, (tx) => tx.uow.deleteProfile(name));
}
