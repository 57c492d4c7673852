#!/usr/bin/env bash
# The crates as a registry gets them. `cargo package` packs rustbuilder-runtime, rustbuilder-envtest and the
# CLI, and builds the two runtime crates from their packages (its verify step); then a CLI installed from
# its package (`cargo install --path <package>`) must scaffold, byte for byte, what the CLI built here
# scaffolds: the templates and the runtime sources that `init` copies all come from the package.
#
#   RUSTBUILDER=<the CLI built here> hack/test-package.sh   (make test-package)
#
# About a minute with warm caches: the packages are built in the shared target dir, so only the three
# crates compile. The CLI is built once, by `cargo install`, not also by `cargo package`: its verify step
# would build it where the CLI of the repository is built (same package, same target dir) and each would
# rebuild after the other. Building the scaffolded project is left out: it is byte-identical to what the
# CLI of the repository scaffolds, which the golden projects' tests build.
set -euo pipefail
cd "$(dirname "$0")/.."

rustbuilder=${RUSTBUILDER:?set RUSTBUILDER to the CLI built from this repository (make build)}
target=${CARGO_TARGET_DIR:?set CARGO_TARGET_DIR: the packages are written to its package/ directory}
[ -x "$rustbuilder" ] || { echo "no rustbuilder at $rustbuilder: run 'make build'" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
packages=$target/package

step() { printf '==> %s\n' "$*"; }

step "cargo package: the three crates"
# `--workspace` lets each package depend on the others' packages before they are published.
# `--allow-dirty`: the working tree is what is tested, committed or not.
cargo package --locked --allow-dirty --workspace --no-verify
for name in rustbuilder rustbuilder-runtime rustbuilder-envtest; do
  [ -s "$packages/$name-$version.crate" ] || { echo "cargo package wrote no $name-$version.crate" >&2; exit 1; }
done

# The workspace's dev profile (Cargo.toml's [profile.dev] tables) as --config flags, for the builds whose
# root is a package, not the workspace: the packages build their dependencies as the workspace does, and
# share those builds in the target dir.
mapfile -t dev_profile < <(python3 -c '
import json, tomllib

def flags(key, value):
    if isinstance(value, dict):
        for name, inner in value.items():
            yield from flags(f"{key}.{json.dumps(name)}", inner)
    else:
        yield from ("--config", f"{key}={json.dumps(value)}")

print("\n".join(flags("profile.dev", tomllib.load(open("Cargo.toml", "rb"))["profile"]["dev"])))
')
[ ${#dev_profile[@]} -gt 0 ] || { echo "no [profile.dev] in Cargo.toml" >&2; exit 1; }

step "cargo package: rustbuilder-runtime and rustbuilder-envtest built from their packages"
# The runtime crates leave the Kubernetes version to the binary that uses them; a build alone needs one.
K8S_OPENAPI_ENABLED_VERSION=1.36 cargo package "${dev_profile[@]}" --locked --allow-dirty -p rustbuilder-runtime -p rustbuilder-envtest

work=$(mktemp -d -t rustbuilder-package-XXXXXX)
trap 'rm -rf "$work"' EXIT

step "cargo install: the CLI from its package"
# The CLI's package depends on rustbuilder-envtest $version from the registry. Until that is published, a
# workspace around the two packages patches it to the envtest package just made, and keeps the versions
# of every other dependency that the CLI's package locks.
mkdir "$work/ws"
tar -xzf "$packages/rustbuilder-$version.crate" -C "$work/ws"
tar -xzf "$packages/rustbuilder-envtest-$version.crate" -C "$work/ws"
cp "$work/ws/rustbuilder-$version/Cargo.lock" "$work/ws/Cargo.lock"
cat >"$work/ws/Cargo.toml" <<EOF
[workspace]
members = ["rustbuilder-$version"]
resolver = "3"

[patch.crates-io]
rustbuilder-envtest = { path = "rustbuilder-envtest-$version" }
EOF
(cd "$work/ws" && cargo update --offline --quiet -p rustbuilder-envtest)
cargo install "${dev_profile[@]}" --locked --offline --debug --path "$work/ws/rustbuilder-$version" --root "$work/installed"
installed=$work/installed/bin/rustbuilder
"$installed" --version

step "the installed CLI scaffolds what this one does"
scaffold() { # <cli> <parent directory>
  mkdir -p "$2/project"
  (
    cd "$2/project"
    "$1" --quiet init --domain example.com --owner "The Memcached Authors"
    "$1" --quiet create api --group cache --version v1alpha1 --kind Memcached \
      --image memcached:1.6.26-alpine3.19 --image-container-command memcached,--memory-limit=64,-o,modern,-v \
      --image-container-port 11211 --run-as-user 1001 --plugins deploy-image/v1-alpha
    "$1" --quiet create api --group cache --version v1alpha1 --kind Cache --resource --controller
  )
}
scaffold "$rustbuilder" "$work/repository"
scaffold "$installed" "$work/packaged"
[ -f "$work/packaged/project/rustbuilder/runtime/src/lib.rs" ] || {
  echo "the installed CLI wrote no rustbuilder/runtime/src/lib.rs" >&2
  exit 1
}
if ! diff -r "$work/repository/project" "$work/packaged/project"; then
  echo "the CLI installed from its package scaffolds other files than the CLI built here (above: < here, > package)" >&2
  echo "help: a file init or create api needs is missing from the package: see \`include\` in Cargo.toml and vendored/" >&2
  exit 1
fi
echo "test-package: 3 packages; the installed CLI scaffolded $(find "$work/packaged/project" -type f | wc -l) files, identical"
