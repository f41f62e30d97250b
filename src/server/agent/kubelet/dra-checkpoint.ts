/**
 * The DRA plugin's checkpoint (decision 75): the claims it prepared, by UID,
 * in one JSON file written whole and atomically (a temporary file, fsync,
 * rename, fsync of the directory), so that an agent restart answers a
 * prepare or an unprepare exactly as before it.
 *
 * An entry is written `preparing` (with the nonce of its holds' request ids)
 * before any device is held, and `prepared` once the holds and the CDI spec
 * are made: a restart in between finds the same holds again (same request
 * ids) on the kubelet's retry, or releases them at its unprepare.
 */
import { mkdir, open, readFile, rename } from 'node:fs/promises';
import { dirname } from 'node:path';
import { z } from 'zod';
import { ConfigError } from '../../../errors.js';

const deviceSchema = z.object({
  request: z.string(),
  pool: z.string(),
  device: z.string(),
  address: z.string(),
  arqUuid: z.string(),
  cdiDeviceIds: z.array(z.string()),
});

const claimSchema = z.object({
  namespace: z.string(),
  name: z.string(),
  uid: z.string(),
  nonce: z.string(),
  state: z.enum(['preparing', 'prepared']),
  devices: z.array(deviceSchema),
});

const fileSchema = z.object({ version: z.literal(1), claims: z.record(z.string(), claimSchema) });

export type PreparedDevice = z.infer<typeof deviceSchema>;
export type ClaimEntry = z.infer<typeof claimSchema>;

export class DraCheckpoint {
  private constructor(
    private readonly path: string,
    private readonly claims: Map<string, ClaimEntry>,
  ) {}

  /** The checkpoint at `path`; none yet is empty. One that cannot be read is refused: never guess what was prepared. */
  static async load(path: string): Promise<DraCheckpoint> {
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new DraCheckpoint(path, new Map());
      throw new ConfigError(`kubernetes.dra.checkpoint_file: cannot read ${path}: ${(err as Error).message}`);
    }
    let parsed: z.infer<typeof fileSchema>;
    try {
      parsed = fileSchema.parse(JSON.parse(text));
    } catch (err) {
      throw new ConfigError(
        `kubernetes.dra.checkpoint_file: ${path} is not a DRA checkpoint (${(err as Error).message.split('\n')[0]}); ` +
          'the claims it records would be lost: move it aside only once their devices are released',
      );
    }
    return new DraCheckpoint(path, new Map(Object.entries(parsed.claims)));
  }

  get(uid: string): ClaimEntry | undefined {
    return this.claims.get(uid);
  }

  entries(): ClaimEntry[] {
    return [...this.claims.values()];
  }

  async put(entry: ClaimEntry): Promise<void> {
    const next = new Map(this.claims).set(entry.uid, entry);
    await this.save(next);
    this.claims.set(entry.uid, entry);
  }

  async remove(uid: string): Promise<void> {
    if (!this.claims.has(uid)) return;
    const next = new Map(this.claims);
    next.delete(uid);
    await this.save(next);
    this.claims.delete(uid);
  }

  private async save(claims: Map<string, ClaimEntry>): Promise<void> {
    await mkdir(dirname(this.path), { recursive: true });
    await writeAtomically(
      this.path,
      `${JSON.stringify({ version: 1, claims: Object.fromEntries(claims) })}\n`,
    );
  }
}

/** Replaces `path` with `text` at once: a reader (or a crash) sees the old file or the new one, never half. */
export async function writeAtomically(path: string, text: string): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  const f = await open(tmp, 'w', 0o600);
  try {
    await f.writeFile(text);
    await f.sync();
  } finally {
    await f.close();
  }
  await rename(tmp, path);
  const dir = await open(dirname(path), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}
