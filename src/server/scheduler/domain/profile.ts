/**
 * Device profiles (Cyborg's device profiles): named lists of request groups.
 * Validation is pure and collects every violation, with proto field paths
 * (`profile.groups[0].required_traits[1]`), so a client fixes all at once.
 */

import { BerthError, type FieldViolation } from '../../../errors.js';
import { isResourceClass, isTrait } from '../../../identifiers.js';

export type LiveMigratable = 'yes' | 'no' | 'unset';

/** Asks for `count` devices of one kind: by resource class, or by vendor/product. */
export interface RequestGroup {
  /** '' when matching by vendor/product. */
  resourceClass: string;
  /** Four lower-case hex digits, '' when matching by resource class. */
  vendorId: string;
  productId: string;
  requiredTraits: string[];
  forbiddenTraits: string[];
  liveMigratable: LiveMigratable;
  count: number;
}

export interface Profile {
  name: string;
  uuid: string;
  description: string;
  groups: RequestGroup[];
  createdAt: string;
}

/** What a client sends; absent fields take proto3 defaults. */
export interface ProfileInput {
  name: string;
  description?: string;
  groups: Array<Partial<RequestGroup>>;
}

/** A validated, normalised profile without its server-assigned uuid/createdAt. */
export type ProfileSpec = Omit<Profile, 'uuid' | 'createdAt'>;

export const PROFILE_NAME = /^[A-Za-z0-9_.-]{1,255}$/;
const HEX4 = /^[0-9a-fA-F]{4}$/;
export const MAX_GROUPS = 64;
export const MAX_COUNT = 64;
export const MAX_DESCRIPTION = 1024;

function checkGroup(g: Partial<RequestGroup>, path: string, out: FieldViolation[]): RequestGroup {
  const resourceClass = g.resourceClass ?? '';
  const vendorId = (g.vendorId ?? '').toLowerCase();
  const productId = (g.productId ?? '').toLowerCase();
  const byIds = vendorId !== '' || productId !== '';
  if (resourceClass === '' && !byIds) {
    out.push({
      field: `${path}.resource_class`,
      description: 'a group needs a resource_class, or a vendor_id and product_id',
    });
  } else if (resourceClass !== '' && byIds) {
    out.push({
      field: `${path}.resource_class`,
      description: `give resource_class "${resourceClass}" or vendor_id/product_id, not both`,
    });
  } else if (resourceClass !== '' && !isResourceClass(resourceClass)) {
    out.push({
      field: `${path}.resource_class`,
      description: `"${resourceClass}" is not a resource class (CUSTOM_[A-Z0-9_]{1,248} or a standard name)`,
    });
  }
  if (byIds) {
    for (const [key, value] of [
      ['vendor_id', vendorId],
      ['product_id', productId],
    ] as const) {
      if (!HEX4.test(value)) {
        out.push({ field: `${path}.${key}`, description: `"${value}" is not four hex digits` });
      }
    }
  }
  const traits = (key: string, list: string[] | undefined): string[] => {
    const seen = new Set<string>();
    (list ?? []).forEach((t, i) => {
      if (!isTrait(t)) {
        out.push({
          field: `${path}.${key}[${i}]`,
          description: `"${t}" is not a trait (CUSTOM_[A-Z0-9_]{1,248} or a standard name)`,
        });
      }
      seen.add(t);
    });
    return [...seen];
  };
  const requiredTraits = traits('required_traits', g.requiredTraits);
  const forbiddenTraits = traits('forbidden_traits', g.forbiddenTraits);
  forbiddenTraits.forEach((t, i) => {
    if (requiredTraits.includes(t)) {
      out.push({
        field: `${path}.forbidden_traits[${i}]`,
        description: `trait "${t}" is both required and forbidden`,
      });
    }
  });
  const liveMigratable = g.liveMigratable ?? 'unset';
  if (!['yes', 'no', 'unset'].includes(liveMigratable)) {
    out.push({
      field: `${path}.live_migratable`,
      description: `"${liveMigratable}" is not yes, no or unset`,
    });
  }
  // proto3: 0 means "not given", taken as 1.
  const count = g.count === undefined || g.count === 0 ? 1 : g.count;
  if (!Number.isInteger(count) || count < 1 || count > MAX_COUNT) {
    out.push({ field: `${path}.count`, description: `${count} is not between 1 and ${MAX_COUNT}` });
  }
  return { resourceClass, vendorId, productId, requiredTraits, forbiddenTraits, liveMigratable, count };
}

/** Validate and normalise a profile, or throw INVALID_ARGUMENT listing every violation. */
export function validateProfile(input: ProfileInput): ProfileSpec {
  const out: FieldViolation[] = [];
  if (!PROFILE_NAME.test(input.name)) {
    out.push({
      field: 'profile.name',
      description: `"${input.name}" must be 1-255 characters of letters, digits, _ . -`,
    });
  }
  const description = input.description ?? '';
  if (description.length > MAX_DESCRIPTION) {
    out.push({
      field: 'profile.description',
      description: `${description.length} characters is more than ${MAX_DESCRIPTION}`,
    });
  }
  if (input.groups.length === 0) {
    out.push({ field: 'profile.groups', description: 'a profile needs at least one group' });
  } else if (input.groups.length > MAX_GROUPS) {
    out.push({
      field: 'profile.groups',
      description: `${input.groups.length} groups is more than ${MAX_GROUPS}`,
    });
  }
  const groups = input.groups.map((g, i) => checkGroup(g, `profile.groups[${i}]`, out));
  const [first] = out;
  if (first) {
    throw new BerthError('INVALID_ARGUMENT', out.map((v) => `${v.field}: ${v.description}`).join('; '), {
      fieldViolations: out,
    });
  }
  return { name: input.name, description, groups };
}

/** Whether two specs are the same profile (CreateProfile is idempotent on identical input). */
export const sameProfileSpec = (a: ProfileSpec, b: ProfileSpec): boolean =>
  JSON.stringify([a.name, a.description, a.groups]) === JSON.stringify([b.name, b.description, b.groups]);
