//! rustbuilder scaffolds Kubernetes operators in Rust on kube-rs, the way Kubebuilder does for Go.
//!
//! `cli` parses commands and prints; the other modules do the work and know nothing of the command line:
//! `model` (validated names), `project` (the PROJECT file), `scaffold` (templates, plans, markers),
//! `plugins` (what each command generates), `generate` (a project rebuilt from its PROJECT file), `kubebuilder` (Kubebuilder's PROJECT read as
//! rustbuilder's), `update`
//! (the three-way merge onto a newer scaffold), `rustfmt` (formatting what is generated), `vendored` (the
//! runtime crates written into projects), `manifests` (running a project's manifest writer).

pub mod cli;
pub mod core_types;
pub mod external;
pub mod generate;
pub mod kubebuilder;
pub mod manifests;
pub mod model;
pub mod plugins;
pub mod project;
pub mod rustfmt;
pub mod scaffold;
pub mod shell;
pub mod update;
pub mod vendored;
pub mod versions;
