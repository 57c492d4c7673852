//! Kubernetes' built-in kinds (Deployment, ConfigMap, Ingress, ...): a project can scaffold a controller
//! for one with `create api --resource=false`, using the Rust type k8s-openapi provides.
//!
//! The table comes from k8s-openapi's sources (`hack/core-types.py`), so it lists exactly the kinds the
//! project's k8s-openapi version has. Groups are spelled as on Kubebuilder's command line: `core` for the
//! legacy group, and without `.k8s.io` (`networking`, `rbac.authorization`).

mod table;

use table::CORE_TYPES;

/// One built-in kind at one version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreType {
    /// The group as given to `--group`: `apps`, `core`, `networking`.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// The resource name in URLs and RBAC rules, e.g. `deployments`.
    pub plural: &'static str,
    /// `k8s.io` for groups named `<group>.k8s.io`, else empty (`apps`, `batch`, the core group).
    pub domain: &'static str,
    pub namespaced: bool,
    /// The Rust type, e.g. `k8s_openapi::api::apps::v1::Deployment`.
    pub path: &'static str,
}

impl CoreType {
    /// The API group as the API server names it: `apps`, `networking.k8s.io`, or empty for `core`.
    pub fn api_group(&self) -> String {
        match (self.group, self.domain) {
            ("core", _) => String::new(),
            (group, "") => group.to_string(),
            (group, domain) => format!("{group}.{domain}"),
        }
    }
}

/// The built-in kind `group`/`version`/`kind`, if k8s-openapi has it.
pub fn find(group: &str, version: &str, kind: &str) -> Option<&'static CoreType> {
    CORE_TYPES
        .iter()
        .find(|t| t.group == group && t.version == version && t.kind == kind)
}

/// The versions k8s-openapi has of the built-in `group`/`kind`, for a hint when the version is wrong.
pub fn versions(group: &str, kind: &str) -> Vec<&'static str> {
    CORE_TYPES
        .iter()
        .filter(|t| t.group == group && t.kind == kind)
        .map(|t| t.version)
        .collect()
}

/// Whether `group` is one of Kubernetes' own API groups.
pub fn is_core_group(group: &str) -> bool {
    CORE_TYPES.iter().any(|t| t.group == group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_kinds_kubebuilder_users_scaffold_controllers_for() {
        let deployment = find("apps", "v1", "Deployment").unwrap();
        assert_eq!(deployment.path, "k8s_openapi::api::apps::v1::Deployment");
        assert_eq!(
            (deployment.plural, deployment.namespaced),
            ("deployments", true)
        );
        assert_eq!(deployment.api_group(), "apps");

        let pod = find("core", "v1", "Pod").unwrap();
        assert_eq!(pod.path, "k8s_openapi::api::core::v1::Pod");
        assert_eq!(pod.api_group(), "");

        let ingress = find("networking", "v1", "Ingress").unwrap();
        assert_eq!(ingress.api_group(), "networking.k8s.io");

        let role = find("rbac.authorization", "v1", "ClusterRole").unwrap();
        assert!(!role.namespaced);
        assert_eq!(role.api_group(), "rbac.authorization.k8s.io");
    }

    #[test]
    fn knows_what_it_does_not_have() {
        assert_eq!(find("apps", "v1beta1", "Deployment"), None);
        assert_eq!(find("cache", "v1alpha1", "Memcached"), None);
        assert_eq!(versions("apps", "Deployment"), ["v1"]);
        assert!(is_core_group("batch"));
        assert!(!is_core_group("cache"));
    }

    #[test]
    fn only_watchable_kinds_are_listed() {
        // TokenReview is create-only: there is nothing to list or watch, so no controller for it.
        assert_eq!(find("authentication", "v1", "TokenReview"), None);
    }
}
