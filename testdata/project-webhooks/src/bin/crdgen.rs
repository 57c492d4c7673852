// Copyright The project-webhooks Authors
// SPDX-License-Identifier: Apache-2.0

//! The manifests of the project, from the code: `cargo run --bin crdgen` prints every CRD as YAML;
//! `-- --write` (what `make manifests` runs) writes them to `config/crd/bases/` and
//! `config/rbac/role.yaml` from the `// +rustbuilder:rbac:` markers in `src/` (and
//! `config/webhook/manifests.yaml` from the `// +rustbuilder:webhook:` ones); `-- --check` fails when
//! those files are stale. A kind with several versions is one CRD: its storage version is named below.

use std::process::ExitCode;

use project_webhooks::api;
use rustbuilder_runtime::manifests::Crds;
use rustbuilder_runtime::manifests::crd;
// +rustbuilder:scaffold:imports

fn main() -> ExitCode {
    let crds = Crds::new(vec![
        crd::<api::v1::Memcached>(),
        crd::<api::v1alpha1::Memcached>(),
        // +rustbuilder:scaffold:crds
    ]);
    // Memcached has several versions, stored in etcd at one of them (the hub of their conversion).
    let crds = crds.storage_version::<api::v1::Memcached>();
    let crds = crds.conversion_webhook::<api::v1::Memcached>();
    // +rustbuilder:scaffold:crdoptions
    crds.main()
}
