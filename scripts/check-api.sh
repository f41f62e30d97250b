#!/usr/bin/env bash
# Guards the API: buf lint (STANDARD), and buf breaking (FILE) against the
# previous commit that had proto/, so old clients keep working.
set -euo pipefail
cd "$(dirname "$0")/.."
buf=node_modules/.bin/buf
"$buf" lint
if git rev-parse --verify -q HEAD~1 >/dev/null && git cat-file -e HEAD~1:proto 2>/dev/null; then
  "$buf" breaking --against '.git#ref=HEAD~1'
else
  echo "buf breaking: no previous commit with proto/ to compare against"
fi
