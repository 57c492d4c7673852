//! rustbuilder scaffolds Kubernetes operators in Rust on kube-rs, the way Kubebuilder does for Go.
//!
//! `cli` parses commands and prints; the other modules do the work and know nothing of the command line:
//! `model` (validated names), `project` (the PROJECT file), `scaffold` (templates, plans, markers),
//! `plugins` (what each command generates), `manifests` (CRDs and RBAC), `envtest` (control-plane assets).

pub mod cli;
pub mod manifests;
pub mod model;
pub mod plugins;
pub mod project;
pub mod scaffold;
pub mod shell;
pub mod versions;
