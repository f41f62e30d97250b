/**
 * The agent process's V8 heap: a young generation that stays at its initial
 * size. V8 doubles the young generation (up to two 16 MiB semi-spaces) when
 * many young objects survive a scavenge, which module loading and the first
 * discovery of a large host both do; once grown it stays committed, so about
 * 25 MiB of the agent's ~118 MiB peak was empty nursery (bench/memory.ts,
 * decision 38). The agent's steady state is small and mostly old objects (the
 * inventory), so a 1 MiB nursery costs a few more scavenges at start and
 * nothing measurable after.
 *
 * `--semi-space-growth-factor` is read each time V8 considers growing, so it
 * takes effect when set at run time, unlike `--max-semi-space-size` (read
 * once when the heap is created). An operator who wants a bigger nursery
 * starts node with `--min-semi-space-size=16` (docs/operator-guide.md).
 */
import { setFlagsFromString } from 'node:v8';

/** Call before the agent's modules load (module loading is what grows it first). */
export function keepYoungGenerationSmall(): void {
  setFlagsFromString('--semi-space-growth-factor=1');
}
