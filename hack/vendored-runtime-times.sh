#!/usr/bin/env bash
# Gives each file of a generated project's vendored runtime (rustbuilder/runtime, rustbuilder/envtest)
# that is byte for byte its source in crates/ the source's modification time.
#
# The tests generate many projects, and cargo, which builds their vendored runtime once for all of them
# in the shared build dir, rebuilds it when a source is newer than the build: a freshly written copy
# would be rebuilt each time. With its source's time, an unchanged copy is as old as that source, so
# it is rebuilt only when the runtime changed. A file that differs keeps its own time.
#
#   hack/vendored-runtime-times.sh PROJECT_DIR
set -euo pipefail
project=${1:?usage: vendored-runtime-times.sh PROJECT_DIR}
crates=$(cd "$(dirname "$0")/../crates" && pwd)
for crate in runtime envtest; do
  vendored=$project/rustbuilder/$crate
  [ -d "$vendored" ] || continue
  (cd "$vendored" && find . -type f) | while read -r file; do
    source=$crates/rustbuilder-$crate/$file
    if cmp -s "$vendored/$file" "$source"; then
      touch -r "$source" "$vendored/$file"
    fi
  done
done
