//! The scopes of Kubernetes kinds as the runtime watches them. A leaf; re-exported by
//! [`manager`](crate::manager).

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::Api;
use kube::{Client, Resource};

/// The scopes of Kubernetes kinds, and what "the objects a manager watches" means for each: a namespaced
/// kind is listed in the watched namespace (or all), a cluster-scoped kind across the cluster.
pub trait WatchScope: sealed::Sealed {
    /// An [`Api`] of `K` for a manager watching `namespace` (or all namespaces).
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = Self>;
}

impl WatchScope for NamespaceResourceScope {
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = Self>,
    {
        match namespace {
            Some(namespace) => Api::namespaced(client, namespace),
            None => Api::all(client),
        }
    }
}

impl WatchScope for ClusterResourceScope {
    fn api<K>(client: Client, _namespace: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = Self>,
    {
        Api::all(client)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for k8s_openapi::NamespaceResourceScope {}
    impl Sealed for k8s_openapi::ClusterResourceScope {}
}
