/**
 * Detached helper started by `nvme sanitize`: sleeps until the sanitize's
 * deadline, then completes it under the state lock, so the media is erased
 * even when no one polls the sanitize log (as on a real drive).
 *
 * argv: <statePath> <controller name> <startedAt epoch ms>. It only completes
 * the sanitize it was started for (same startedAt) — a later sanitize on the
 * same controller has its own worker.
 */
import { settleSanitize } from './sanitize-engine.js';
import { loadState, withStateLock } from './state.js';

async function main(): Promise<void> {
  const [statePath, ctrlName, startedAtRaw] = process.argv.slice(2);
  if (!statePath || !ctrlName || !startedAtRaw) return;
  const startedAt = Number(startedAtRaw);
  const ctrl = loadState(statePath).controllers.find((c) => c.name === ctrlName);
  if (!ctrl) return;
  const wait = startedAt + ctrl.sanitize.durationMs - Date.now();
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  await withStateLock(statePath, (state) => {
    const c = state.controllers.find((x) => x.name === ctrlName);
    if (!c || c.sanitize.startedAt !== startedAt) return { changed: false, result: undefined };
    return { changed: settleSanitize(c, Date.now()), result: undefined };
  });
}

main().catch(() => {
  process.exitCode = 1;
});
