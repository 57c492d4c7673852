// Copyright The project-multigroup Authors
// SPDX-License-Identifier: Apache-2.0

//! The manifests of the project, from the code: `cargo run --bin crdgen` prints every CRD as YAML;
//! `-- --write` (what `make manifests` runs) writes them to `config/crd/bases/` and
//! `config/rbac/role.yaml` from the `// +rustbuilder:rbac:` markers in `src/`; `-- --check` fails when
//! those files are stale.

use std::process::ExitCode;

use kube::CustomResourceExt;
use project_multigroup::api;
// +rustbuilder:scaffold:imports

fn main() -> ExitCode {
    rustbuilder_runtime::manifests::main(vec![
        api::cache::v1alpha1::Memcached::crd(),
        api::ship::v1beta1::Frigate::crd(),
        api::ship::v2alpha1::Cruiser::crd(),
        // +rustbuilder:scaffold:crds
    ])
}
