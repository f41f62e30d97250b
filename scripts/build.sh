#!/bin/sh
# Builds dist/ (JavaScript + .d.ts of everything the CLI, the SDK and the driver
# API reach, and the descriptor set beside the generated code): what the npm
# package ships (npm pack runs it through prepack) and what bin/berth runs.
#
#   scripts/build.sh             build
#   scripts/build.sh --if-stale  build only when a source is newer than the last build
#
# Concurrent callers (tests start many bin/berth and bin/nvme-sim at once)
# serialise on a lock; the build goes to a temporary directory that replaces
# dist/ whole, so no caller ever runs a half-written tree.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
stamp="$repo/dist/.built"
stale() {
  [ ! -f "$stamp" ] && return 0
  [ -n "$(find "$repo/src" "$repo/package.json" "$repo/tsconfig.json" "$repo/tsconfig.build.json" \
    -newer "$stamp" \( -name '*.ts' -o -name '*.json' -o -name '*.binpb' \) -print 2>/dev/null | head -n 1)" ]
}
if [ "${1:-}" = --if-stale ] && ! stale; then exit 0; fi
mkdir -p "$repo/node_modules/.cache"
exec 9>"$repo/node_modules/.cache/berth-build.lock"
flock 9
# Someone else may have built it while this one waited for the lock.
if [ "${1:-}" = --if-stale ] && ! stale; then exit 0; fi
tmp="$repo/dist.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
"$repo/node_modules/.bin/tsc" -p "$repo/tsconfig.build.json" --outDir "$tmp"
cp "$repo/src/gen/berth.binpb" "$tmp/gen/berth.binpb"
touch "$tmp/.built"
rm -rf "$repo/dist.old.$$"
[ -d "$repo/dist" ] && mv "$repo/dist" "$repo/dist.old.$$"
mv "$tmp" "$repo/dist"
rm -rf "$repo/dist.old.$$"
