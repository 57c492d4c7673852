//! The versions a generated project is pinned to. One Kubernetes minor for everything: the k8s-openapi
//! feature and the envtest assets must agree.

/// kube-rs (client, runtime, derive).
pub const KUBE: &str = "5.0.0";
/// k8s-openapi, with exactly one Kubernetes feature.
pub const K8S_OPENAPI: &str = "0.29.0";
pub const K8S_OPENAPI_FEATURE: &str = "v1_36";
/// The Kubernetes release the envtest assets are built from.
pub const KUBERNETES: &str = "1.36.3";
/// etcd for that release.
pub const ETCD: &str = "3.6.16";
/// kwok, for fake nodes in the cluster-mode tests.
pub const KWOK: &str = "0.8.0";
