/** ProfileService: named device profiles (validated by the domain's profile module). */

import type { Logger } from 'pino';
import { invalidArgument, notFound } from '../../../errors.js';
import {
  type CreateProfileRequest,
  type DeleteProfileRequest,
  type GetProfileRequest,
  type ProfileServiceServer,
  ProfileServiceService,
} from '../../../gen/berth/scheduler/v1/profile.js';
import { unary } from '../../grpc/handlers.js';
import type { ServiceBinding } from '../../grpc/server.js';
import { profileInputFromProto, profileToProto } from '../convert.js';
import { PROFILE_NAME, validateProfile } from '../domain/profile.js';
import type { UseCases } from '../usecases/use-cases.js';

function requireName(field: string, v: string): string {
  if (!PROFILE_NAME.test(v))
    throw invalidArgument(field, `${JSON.stringify(v)} is not a profile name ([A-Za-z0-9_.-], 1-255)`);
  return v;
}

export function profileServiceBinding(useCases: UseCases, logger: Logger): ServiceBinding {
  const impl: ProfileServiceServer = {
    createProfile: unary('CreateProfile', logger, async (req: CreateProfileRequest) => {
      const spec = validateProfile(profileInputFromProto(req.profile));
      return { profile: profileToProto(await useCases.createProfile(spec)) };
    }),
    getProfile: unary('GetProfile', logger, async (req: GetProfileRequest) => {
      if (req.name === '') throw invalidArgument('name', 'is required (a profile name or uuid)');
      return { profile: profileToProto(await useCases.getProfile(req.name)) };
    }),
    listProfiles: unary('ListProfiles', logger, async () => ({
      profiles: (await useCases.listProfiles()).map(profileToProto),
    })),
    deleteProfile: unary('DeleteProfile', logger, async (req: DeleteProfileRequest) => {
      const name = requireName('name', req.name);
      if (!(await useCases.deleteProfile(name))) throw notFound('profile', name);
      return {};
    }),
  };
  return {
    name: 'berth.scheduler.v1.ProfileService',
    definition: ProfileServiceService,
    implementation: impl,
  };
}
