//! `create webhook`: defaulting and validating webhooks for an API, and conversion between its versions.
//!
//! Defaulting and validation live in `src/webhook/<version>/<kind>.rs` (one unit struct implementing the
//! runtime's `Defaulter` and `Validator`), registered in `src/main.rs`. Conversion follows Kubebuilder's
//! hub and spoke model: the version given is the hub (the version stored in etcd), and each `--spoke`
//! version gets `src/api/<spoke>/<kind>_conversion.rs` with `From` in both directions, next to the spoke's
//! type as Kubebuilder puts `<kind>_conversion.go` next to the spoke's types. A webhook type added to a kind
//! that has another one goes in at the scaffold markers of the existing files: the user's code stays.

use std::path::Path;

use anyhow::{Result, bail};
use serde::Serialize;

use super::rust::{self, ApiOptions, ExternalOptions, ProjectContext};
use crate::core_types::{self, CoreType};
use crate::external::{self, ExternalCrd};
use crate::model::{Domain, Group, Kind, Plural, Version, WebhookPath};
use crate::project::{self, Project, Resource, Webhooks};
use crate::scaffold::{self, Insertion, Plan};
use crate::versions;

/// The crate of the webhooks' tests: one test binary, a module per kind and version, and one per
/// converted kind.
pub const WEBHOOK_TESTS: &str = "tests/webhooks/main.rs";

/// The AdmissionReview version of the generated webhooks.
const WEBHOOK_VERSION: &str = "v1";

#[derive(Debug, Clone)]
pub struct WebhookOptions {
    pub group: Group,
    pub version: Version,
    pub kind: Kind,
    /// `--defaulting`: a mutating webhook that fills in what the user left out.
    pub defaulting: bool,
    /// `--programmatic-validation`: a validating webhook.
    pub validation: bool,
    /// `--conversion`: this version is the hub the `spokes` convert to and from.
    pub conversion: bool,
    pub spokes: Vec<Version>,
    /// `--defaulting-path`: the defaulting webhook's route instead of `/mutate-<group>-<version>-<kind>`.
    pub defaulting_path: Option<WebhookPath>,
    /// `--validation-path`: the validating webhook's route instead of `/validate-…`.
    pub validation_path: Option<WebhookPath>,
    /// `--external-api-path`: the kind is another operator's, not yet in PROJECT; its types are
    /// generated first, as `create api --resource=false --controller=false` does.
    pub external: Option<ExternalOptions>,
    pub force: bool,
    /// `--plural`, Kubebuilder's: must be the plural the kind has.
    pub plural: Option<Plural>,
}

/// Where the type a webhook is called for comes from.
enum Target {
    /// The project's own API (`create api`): `crate::api::…`.
    Own,
    /// A Kubernetes built-in kind: the k8s-openapi type.
    Core(&'static CoreType),
    /// Another operator's kind: the types generated from its CRD into `src/external/`.
    External(ExternalCrd),
}

/// Values the webhook templates see, on top of the project's.
#[derive(Debug, Serialize)]
struct WebhookContext {
    group: String,
    group_snake: String,
    /// The API group as the API server names it: `cache.example.com`, `apps`, empty for core.
    qualified_group: String,
    /// The group in the marker's `groups=`: the API group, or `""` for core.
    marker_group: String,
    /// `apps/v1`, `v1` (core), `cache.example.com/v1alpha1`.
    api_version: String,
    version: String,
    kind: String,
    kind_snake: String,
    /// The stem of the kind's files outside its module: `memcached`, or `cache_memcached` (multigroup).
    kind_file: String,
    kind_lower: String,
    plural: String,
    /// The plural as a Rust identifier.
    plural_snake: String,
    namespaced: bool,
    /// The kind's Rust type in the crate (`crate::api::v1alpha1::Memcached`), in k8s-openapi
    /// (`k8s_openapi::api::apps::v1::Deployment`) or generated from another operator's CRD
    /// (`crate::external::cert_manager::v1::Issuer`).
    type_path: String,
    /// The same type seen from the tests: the crate's name in place of `crate`.
    test_type_path: String,
    /// Where the type comes from: `own`, `core` or `external`.
    source: &'static str,
    /// Whether `Kind::new(name, Default::default())` builds an object (own and external kinds).
    spec_default: bool,
    /// A built-in kind's spec the API server accepts, as a `json!` body, when its metadata is not
    /// enough.
    core_sample: Option<&'static str>,
    /// For an external kind whose spec has required fields: the smallest spec its CRD admits, as JSON.
    external_sample: Option<String>,
    /// `cache/` in a multigroup project, else empty.
    group_path: String,
    /// `cache::` in a multigroup project, else empty: the group's module below `api` and `webhook`.
    group_rel: String,
    /// `api::v1alpha1`, or `api::cache::v1alpha1` (multigroup).
    api_path: String,
    /// `webhook::v1alpha1::memcached`, or `webhook::cache::v1alpha1::memcached` (multigroup).
    webhook_path: String,
    /// The routes, as the runtime serves them and Kubebuilder names them.
    mutate_path: String,
    validate_path: String,
    /// How `src/main.rs` and the test register the webhooks: `defaulter(MemcachedWebhook)`, or
    /// `defaulter_at("/custom-path", MemcachedWebhook)` for a custom path.
    defaulter_call: String,
    validator_call: String,
    /// The stem of the e2e checks' module, one per version of a kind: `memcached_v1alpha1_webhook`.
    webhook_test: String,
    /// The test's module in the webhooks' test crate, one per version of a kind: `memcached_v1alpha1`
    /// (`cache_memcached_v1alpha1` in a multigroup project).
    webhook_module: String,
    /// Which webhooks the kind's file holds (rendered whole) or gains (fragments).
    defaulting: bool,
    validation: bool,
    multigroup: bool,
}

/// Values of one spoke's conversion file.
#[derive(Debug, Serialize)]
struct ConversionContext {
    spoke: String,
    spoke_api_path: String,
    /// The hub's version and module.
    hub: String,
    hub_api_path: String,
    /// The fields both versions were scaffolded with, converted one by one.
    spec_fields: Vec<Field>,
    status_fields: Vec<Field>,
}

/// A field of a scaffolded type, with a value for the round-trip tests.
#[derive(Debug, Clone, Copy, Serialize)]
struct Field {
    name: &'static str,
    sample: &'static str,
}

const fn field(name: &'static str, sample: &'static str) -> Field {
    Field { name, sample }
}

/// The fields `create api` gives a type (`spec`, `status`), by the plugin that scaffolded it.
fn scaffolded_fields(deploy_image: bool) -> (Vec<Field>, Vec<Field>) {
    let mut status = vec![
        field("conditions", "Vec::new()"),
        field("observed_generation", "Some(3)"),
    ];
    if deploy_image {
        status.extend([
            field("replicas", "Some(3)"),
            field("ready_replicas", "Some(2)"),
            field("selector", "Some(\"app=sample\".to_string())"),
        ]);
        (vec![field("size", "3")], status)
    } else {
        (vec![field("foo", "Some(\"bar\".to_string())")], status)
    }
}

/// Plans `create webhook` in the project at `dir`.
pub fn create_webhook(dir: &Path, options: &WebhookOptions) -> Result<Plan> {
    let (group, version, kind) = (&options.group, &options.version, &options.kind);
    check_flags(options)?;
    // With `--external-api-path`, the kind's types come first, in the same plan: all or nothing.
    let (mut plan, mut project) = match &options.external {
        Some(external) => {
            let loaded = Project::load(dir)?;
            if let Some(r) = loaded.find(group, version, kind).filter(|r| r.external) {
                bail!(
                    "`{group}/{version}, Kind={kind}` is in PROJECT already as another operator's kind, with its CRD in `{}`\nhelp: drop `--external-api-path` (and `--external-api-domain`): the webhook is scaffolded for the kind PROJECT has",
                    r.path.as_deref().unwrap_or_default()
                );
            }
            let types = rust::plan_api(
                dir,
                &ApiOptions {
                    group: group.clone(),
                    version: version.clone(),
                    kind: kind.clone(),
                    plural: None,
                    resource: false,
                    controller: false,
                    namespaced: true,
                    force: false,
                    controller_name: None,
                    external: Some(external.clone()),
                },
            )?;
            (types.plan, types.project)
        }
        None => (Plan::new(dir), Project::load(dir)?),
    };
    let domain: Domain = project.domain.parse()?;
    let existing = project.find(group, version, kind).cloned();
    let target = target(dir, &domain, options, existing.as_ref())?;
    let (api_group, plural, namespaced) = match &target {
        Target::Own => {
            let resource = existing.as_ref().expect("an own API is in PROJECT");
            let plural = match &resource.plural {
                Some(p) => p.clone(),
                None => kind.default_plural().to_string(),
            };
            let namespaced = resource.api.as_ref().is_some_and(|a| a.namespaced);
            (group.qualified(&domain)?, plural, namespaced)
        }
        Target::Core(core) => (core.api_group(), core.plural.to_string(), core.namespaced),
        Target::External(crd) => (crd.api_group.clone(), crd.plural.clone(), crd.namespaced),
    };
    if let Some(given) = &options.plural
        && given.as_str() != plural
    {
        bail!(
            "`--plural {given}` is not the plural of {kind}, which is `{plural}`\nhelp: drop `--plural` (the webhook uses the kind's plural), or give `--plural {plural}`"
        );
    }
    // Built-in kinds are named as on the command line (`core/v1`), others with their full group.
    let gvk = match &target {
        Target::Core(_) => format!("`{group}/{version}, Kind={kind}`"),
        _ => format!("`{api_group}/{version}, Kind={kind}`"),
    };

    if options.conversion {
        if !matches!(target, Target::Own) {
            bail!(
                "{gvk} is not an API of this project: a conversion webhook converts between versions of the project's own types\nhelp: drop `--conversion`"
            );
        }
        let other_versions: Vec<String> = project
            .resources
            .iter()
            .filter(|r| {
                r.group == group.as_str()
                    && r.kind == kind.as_str()
                    && r.version != version.as_str()
                    && r.api.is_some()
            })
            .map(|r| r.version.clone())
            .collect();
        check_conversion(&project, options, &gvk, &other_versions)?;
    }

    let existing_webhooks = existing
        .as_ref()
        .and_then(|r| r.webhooks.clone())
        .unwrap_or_default();
    if !options.force {
        let file = webhook_file(project.multigroup, group, version, kind);
        for (asked, had, what, location) in [
            (
                options.defaulting,
                existing_webhooks.defaulting,
                "defaulting",
                &file,
            ),
            (
                options.validation,
                existing_webhooks.validation,
                "validation",
                &file,
            ),
            (
                options.conversion,
                existing_webhooks.conversion,
                "conversion",
                &"the spokes' `*_conversion.rs` files".to_string(),
            ),
        ] {
            if asked && had {
                bail!(
                    "the {what} webhook of {gvk} already exists\nhelp: pass `--force` to scaffold it again (overwrites {location}), or choose another webhook type"
                );
            }
        }
    }
    if options.defaulting || options.validation {
        check_webhook_file(&project, options)?;
    }

    let base = ProjectContext::of(&project, dir)?;
    let multigroup = project.multigroup;
    let group_snake = group.snake();
    let (group_path, group_rel) = if multigroup {
        (format!("{group_snake}/"), format!("{group_snake}::"))
    } else {
        (String::new(), String::new())
    };
    let kind_lower = kind.as_str().to_lowercase();
    // What the kind's webhook file holds after this command, and what it gains.
    let defaulting = existing_webhooks.defaulting || options.defaulting;
    let validation = existing_webhooks.validation || options.validation;
    // A custom path sticks until another is given.
    let defaulting_path = options
        .defaulting_path
        .as_ref()
        .map(ToString::to_string)
        .or_else(|| existing_webhooks.defaulting_path.clone());
    let validation_path = options
        .validation_path
        .as_ref()
        .map(ToString::to_string)
        .or_else(|| existing_webhooks.validation_path.clone());
    let route = default_route(&api_group, version.as_str(), kind.as_str());
    let mutate_path = defaulting_path
        .clone()
        .unwrap_or_else(|| format!("/mutate-{route}"));
    let validate_path = validation_path
        .clone()
        .unwrap_or_else(|| format!("/validate-{route}"));
    check_paths(
        &project,
        options,
        defaulting.then_some(mutate_path.as_str()),
        validation.then_some(validate_path.as_str()),
    )?;

    let webhook_name = format!("{}Webhook", kind);
    let call = |method: &str, custom: &Option<String>| match custom {
        Some(path) => format!("{method}_at(\"{path}\", {webhook_name})"),
        None => format!("{method}({webhook_name})"),
    };
    let (type_path, test_type_path, source, spec_default) = match &target {
        Target::Own => {
            let rel = format!("api::{group_rel}{version}::{kind}");
            (
                format!("crate::{rel}"),
                format!("{}::{rel}", base.crate_name),
                "own",
                true,
            )
        }
        Target::Core(core) => (core.path.to_string(), core.path.to_string(), "core", true),
        Target::External(crd) => {
            let rel = format!("{}::{group_snake}::{version}::{kind}", external::MODULE);
            (
                format!("crate::{rel}"),
                format!("{}::{rel}", base.crate_name),
                "external",
                spec_derives_default(&crd.rust_types(version)?),
            )
        }
    };
    let api_version = if api_group.is_empty() {
        version.to_string()
    } else {
        format!("{api_group}/{version}")
    };
    let api = WebhookContext {
        group: group.to_string(),
        group_snake: group_snake.clone(),
        qualified_group: api_group.clone(),
        marker_group: if api_group.is_empty() {
            "\"\"".to_string()
        } else {
            api_group.clone()
        },
        api_version,
        version: version.to_string(),
        kind: kind.to_string(),
        kind_snake: kind.snake(),
        kind_file: super::rust::group_prefix(multigroup, &group_snake, &kind.snake()),
        kind_lower: kind_lower.clone(),
        plural_snake: plural.replace('-', "_"),
        plural,
        namespaced,
        group_rel: group_rel.clone(),
        api_path: format!("api::{group_rel}{version}"),
        webhook_path: format!("webhook::{group_rel}{version}::{}", kind.snake()),
        type_path,
        test_type_path,
        source,
        spec_default,
        core_sample: match &target {
            Target::Core(core) => core_sample(core),
            _ => None,
        },
        external_sample: match &target {
            Target::External(crd) if !spec_default => {
                Some(serde_json::to_string_pretty(&crd.sample_spec(version)?)?)
            }
            _ => None,
        },
        mutate_path,
        validate_path,
        defaulter_call: call("defaulter", &defaulting_path),
        validator_call: call("validator", &validation_path),
        webhook_test: if multigroup {
            format!("{group_snake}_{}_{version}_webhook", kind.snake())
        } else {
            format!("{}_{version}_webhook", kind.snake())
        },
        webhook_module: format!(
            "{}_{version}",
            super::rust::group_prefix(multigroup, &group_snake, &kind.snake())
        ),
        group_path,
        defaulting,
        validation,
        multigroup,
    };
    let mut context = tera::Context::from_serialize(&base)?;
    context.extend(tera::Context::from_serialize(&api)?);

    plan.add_set("webhook-config", &context)?;
    if multigroup && (options.defaulting || options.validation) {
        plan.add_set("webhook-group", &context)?;
    }
    wire_config(&mut plan, options.defaulting || options.validation)?;
    if options.defaulting || options.validation {
        plan_admission(
            &mut plan,
            &base,
            &api,
            &existing_webhooks,
            options,
            &context,
        )?;
    }
    if options.conversion {
        plan_conversion(&mut plan, &project, &base, &api, options, &context)?;
    }

    let mut webhooks = Webhooks {
        conversion: existing_webhooks.conversion || options.conversion,
        defaulting,
        defaulting_path,
        spoke: existing_webhooks.spoke.clone(),
        validation,
        validation_path,
        webhook_version: WEBHOOK_VERSION.to_string(),
    };
    for spoke in &options.spokes {
        if !webhooks.spoke.iter().any(|s| s == spoke.as_str()) {
            webhooks.spoke.push(spoke.to_string());
        }
    }
    let resource = match (existing, &target) {
        (Some(resource), _) => resource,
        // A built-in kind PROJECT did not have: recorded as `create api --resource=false` records it.
        (None, Target::Core(core)) => Resource {
            api: None,
            controller: false,
            controllers: Vec::new(),
            core: true,
            domain: core.domain.to_string(),
            external: false,
            group: group.to_string(),
            kind: kind.to_string(),
            module: None,
            path: Some(core.path.to_string()),
            plural: None,
            version: version.to_string(),
            webhooks: None,
        },
        (None, _) => unreachable!("own and external kinds are in PROJECT by now"),
    };
    project.upsert(Resource {
        webhooks: Some(webhooks),
        ..resource
    });
    plan.add(
        project::FILE_NAME,
        project.render(),
        scaffold::IfExists::Overwrite,
    );
    if options.force {
        plan.force();
    }
    Ok(plan)
}

/// The flags on their own: something to scaffold, and each option with the webhook it is for.
fn check_flags(options: &WebhookOptions) -> Result<()> {
    let (group, version, kind) = (&options.group, &options.version, &options.kind);
    if !(options.defaulting || options.validation || options.conversion) {
        bail!(
            "nothing to scaffold: `create webhook` needs at least one of `--defaulting`, `--programmatic-validation` and `--conversion`\nhelp: e.g. `rustbuilder create webhook --group {group} --version {version} --kind {kind} --defaulting --programmatic-validation`"
        );
    }
    if !options.conversion && !options.spokes.is_empty() {
        bail!(
            "`--spoke` names the versions a conversion webhook converts, but `--conversion` is not given\nhelp: add `--conversion`, or drop `--spoke`"
        );
    }
    if let Some(path) = &options.defaulting_path
        && !options.defaulting
    {
        bail!(
            "`--defaulting-path {path}` is the route of the defaulting webhook, but `--defaulting` is not given\nhelp: add `--defaulting`, or drop `--defaulting-path`"
        );
    }
    if let Some(path) = &options.validation_path
        && !options.validation
    {
        bail!(
            "`--validation-path {path}` is the route of the validating webhook, but `--programmatic-validation` is not given\nhelp: add `--programmatic-validation`, or drop `--validation-path`"
        );
    }
    if let (Some(d), Some(v)) = (&options.defaulting_path, &options.validation_path)
        && d == v
    {
        bail!(
            "`--defaulting-path` and `--validation-path` are both `{d}`: the webhook server routes each call by its path, so each webhook needs its own\nhelp: give them different paths, e.g. `--defaulting-path /custom-mutate-{k} --validation-path /custom-validate-{k}`",
            k = kind.as_str().to_lowercase()
        );
    }
    Ok(())
}

/// The type the webhook is for: the kind PROJECT has (the project's API, a built-in kind, another
/// operator's), else a Kubernetes built-in kind.
fn target(
    dir: &Path,
    domain: &Domain,
    options: &WebhookOptions,
    existing: Option<&Resource>,
) -> Result<Target> {
    let (group, version, kind) = (&options.group, &options.version, &options.kind);
    let builtin = core_types::find(group.as_str(), version.as_str(), kind.as_str());
    match existing {
        Some(r) if r.api.is_some() => return Ok(Target::Own),
        // Just planned from `--external-api-path`: its copy is not written yet.
        Some(r) if r.external && options.external.is_some() => {
            let source = options.external.as_ref().expect("checked");
            let file = source.crd_file(group, kind)?;
            let crd = ExternalCrd::read(&file, group, version, kind, source.domain.as_ref())?;
            return Ok(Target::External(crd));
        }
        Some(r) if r.external => {
            let path = r.path.as_deref().unwrap_or_default();
            let domain = (!r.domain.is_empty())
                .then(|| r.domain.parse::<Domain>())
                .transpose()?;
            let crd = ExternalCrd::read(&dir.join(path), group, version, kind, domain.as_ref())
                .map_err(|e| {
                    e.context(format!(
                        "PROJECT records `{group}/{version}, Kind={kind}` as external, with its CRD in `{path}`"
                    ))
                })?;
            return Ok(Target::External(crd));
        }
        _ => {}
    }
    if let Some(core) = builtin {
        return Ok(Target::Core(core));
    }
    if existing.is_some_and(|r| r.core) {
        bail!(
            "PROJECT records `{group}/{version}, Kind={kind}` as a Kubernetes built-in kind, but k8s-openapi {} has no such kind\nhelp: check the group, version and kind in PROJECT",
            versions::K8S_OPENAPI
        );
    }
    if core_types::is_core_group(group.as_str()) {
        let known = core_types::versions(group.as_str(), kind.as_str());
        let help = if known.is_empty() {
            format!(
                "k8s-openapi {} has no kind `{kind}` in the built-in group `{group}`: check the kind",
                versions::K8S_OPENAPI
            )
        } else {
            format!(
                "the built-in `{group}` `{kind}` is at `--version {}`",
                known.join("` or `--version ")
            )
        };
        bail!(
            "`{group}/{version}, Kind={kind}` is not a Kubernetes built-in kind, and PROJECT has no API for it\nhelp: {help}"
        );
    }
    let qualified = group.qualified(domain)?;
    bail!(
        "no API for `{qualified}/{version}, Kind={kind}` in PROJECT: a webhook needs the type it is called for\nhelp: run `rustbuilder create api --group {group} --version {version} --kind {kind}` first, or pass `--external-api-path <CRD file>` for another operator's kind"
    )
}

/// `<group with - for .>-<version>-<kind>`, the route of a webhook after `/mutate-` or `/validate-`,
/// as Kubebuilder (and the runtime's `mutate_path`) names it: `apps-v1-deployment`, `-v1-pod`.
fn default_route(api_group: &str, version: &str, kind: &str) -> String {
    format!(
        "{}-{version}-{}",
        api_group.replace('.', "-"),
        kind.to_lowercase()
    )
}

/// The API group of a resource of PROJECT, as the API server names it.
fn api_group_of(project: &Project, resource: &Resource) -> String {
    if resource.core
        && let Some(core) = core_types::find(&resource.group, &resource.version, &resource.kind)
    {
        return core.api_group();
    }
    let domain = if resource.external {
        &resource.domain
    } else {
        &project.domain
    };
    if domain.is_empty() {
        resource.group.clone()
    } else {
        format!("{}.{domain}", resource.group)
    }
}

/// Each admission webhook of the project has a route of its own: the webhook server routes calls by
/// path alone.
fn check_paths(
    project: &Project,
    options: &WebhookOptions,
    mutate: Option<&str>,
    validate: Option<&str>,
) -> Result<()> {
    let (group, version, kind) = (&options.group, &options.version, &options.kind);
    if let (Some(m), Some(v)) = (mutate, validate)
        && m == v
    {
        bail!(
            "the defaulting and validating webhooks of `{kind}` would both be served at `{m}`\nhelp: give them different paths with `--defaulting-path` and `--validation-path`"
        );
    }
    for other in &project.resources {
        let is_self = other.group == group.as_str()
            && other.version == version.as_str()
            && other.kind == kind.as_str();
        let Some(webhooks) = other.webhooks.as_ref().filter(|_| !is_self) else {
            continue;
        };
        let route = default_route(&api_group_of(project, other), &other.version, &other.kind);
        let theirs = [
            webhooks.defaulting.then(|| {
                webhooks
                    .defaulting_path
                    .clone()
                    .unwrap_or_else(|| format!("/mutate-{route}"))
            }),
            webhooks.validation.then(|| {
                webhooks
                    .validation_path
                    .clone()
                    .unwrap_or_else(|| format!("/validate-{route}"))
            }),
        ];
        for (mine, flag) in [
            (mutate, "--defaulting-path"),
            (validate, "--validation-path"),
        ] {
            let Some(mine) = mine else { continue };
            if theirs.iter().flatten().any(|p| p == mine) {
                bail!(
                    "`{mine}` is already the route of a webhook of `{}/{}, Kind={}`: the webhook server routes each call by its path, so each webhook needs its own\nhelp: choose another path with `{flag}`",
                    other.group,
                    other.version,
                    other.kind
                );
            }
        }
    }
    Ok(())
}

/// In a project with one group, a kind's webhooks are in `src/webhook/<version>/<kind>.rs`: a kind of
/// the same name and version in another group (a built-in or another operator's) would need the same
/// file.
fn check_webhook_file(project: &Project, options: &WebhookOptions) -> Result<()> {
    if project.multigroup {
        return Ok(());
    }
    let (group, version, kind) = (&options.group, &options.version, &options.kind);
    if let Some(other) = project.resources.iter().find(|r| {
        r.kind == kind.as_str()
            && r.version == version.as_str()
            && r.group != group.as_str()
            && r.webhooks
                .as_ref()
                .is_some_and(|w| w.defaulting || w.validation)
    }) {
        bail!(
            "{} holds the webhooks of `{}/{version}, Kind={kind}` already, and the webhooks of `{group}/{version}, Kind={kind}` would need the same file\nhelp: run `rustbuilder edit --multigroup` first: then each group has its own `src/webhook/<group>/`",
            webhook_file(false, group, version, kind),
            other.group
        );
    }
    Ok(())
}

/// Whether the spec of generated external types derives `Default`: then `Kind::new(name,
/// Default::default())` builds a sample.
fn spec_derives_default(types: &str) -> bool {
    types
        .lines()
        .any(|line| line.starts_with("#[derive(CustomResource,") && line.contains(" Default,"))
}

/// The `spec` of a built-in kind the API server accepts, for the test that creates one, as the
/// body of a `json!` value. `None`: the kind is valid with its metadata alone (ConfigMap, Secret,
/// ...), or the test leaves its spec to the user.
fn core_sample(core: &CoreType) -> Option<&'static str> {
    Some(match (core.group, core.kind) {
        ("core", "Pod") => {
            r#"{ "containers": [{ "name": "app", "image": "registry.k8s.io/pause:3.10" }] }"#
        }
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet") => {
            r#"{
            "selector": { "matchLabels": { "app": "sample" } },
            "template": {
                "metadata": { "labels": { "app": "sample" } },
                "spec": { "containers": [{ "name": "app", "image": "registry.k8s.io/pause:3.10" }] }
            }
        }"#
        }
        ("batch", "Job") => {
            r#"{
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{ "name": "app", "image": "registry.k8s.io/pause:3.10" }]
                }
            }
        }"#
        }
        ("core", "Service") => r#"{ "ports": [{ "port": 80 }] }"#,
        _ => return None,
    })
}

/// The kind's webhook file, for messages.
fn webhook_file(multigroup: bool, group: &Group, version: &Version, kind: &Kind) -> String {
    let group_path = if multigroup {
        format!("{}/", group.snake())
    } else {
        String::new()
    };
    format!("`src/webhook/{group_path}{version}/{}.rs`", kind.snake())
}

/// `--conversion`: the kind has other versions, the spokes are among them, and no other version is
/// the hub already.
fn check_conversion(
    project: &Project,
    options: &WebhookOptions,
    gvk: &str,
    other_versions: &[String],
) -> Result<()> {
    let (group, version, kind) = (&options.group, &options.version, &options.kind);
    if other_versions.is_empty() {
        bail!(
            "a conversion webhook converts between versions of a kind, but {gvk} is the only version of `{kind}` in PROJECT\nhelp: add another version first, e.g. `rustbuilder create api --group {group} --version v1 --kind {kind} --controller=false`, then make one of them the hub with `--conversion --spoke <the others>`"
        );
    }
    let listed = other_versions.join(",");
    if options.spokes.is_empty() {
        bail!(
            "`--conversion` makes {version} the hub: it needs the versions that convert to and from it\nhelp: pass `--spoke {listed}`"
        );
    }
    for spoke in &options.spokes {
        if spoke == version {
            bail!(
                "`--spoke {spoke}` is the hub itself: the hub is the version given with `--version`\nhelp: pass the other versions: `--spoke {listed}`"
            );
        }
        if !other_versions.iter().any(|v| v == spoke.as_str()) {
            bail!(
                "unknown spoke version `{spoke}`: `{kind}` has no version {spoke} in PROJECT (it has {listed} besides {version})\nhelp: pass `--spoke {listed}`, or create the version first with `rustbuilder create api --group {group} --version {spoke} --kind {kind} --controller=false`"
            );
        }
    }
    if let Some(hub) = project.resources.iter().find(|r| {
        r.group == group.as_str()
            && r.kind == kind.as_str()
            && r.version != version.as_str()
            && r.webhooks.as_ref().is_some_and(|w| w.conversion)
    }) {
        bail!(
            "`{kind}` already has a hub: version {} holds its conversion webhook, and a kind has one hub\nhelp: add spokes to that hub: `rustbuilder create webhook --group {group} --version {} --kind {kind} --conversion --spoke <versions> --force`",
            hub.version,
            hub.version
        );
    }
    let hubs_spoke = project.resources.iter().find(|r| {
        r.group == group.as_str()
            && r.kind == kind.as_str()
            && options.spokes.iter().any(|s| s.as_str() == r.version)
            && r.webhooks.as_ref().is_some_and(|w| w.conversion)
    });
    if let Some(spoke) = hubs_spoke {
        bail!(
            "version {} of `{kind}` is a hub, so it cannot be a spoke",
            spoke.version
        );
    }
    Ok(())
}

/// The manifests every webhook needs, once per project: `config/webhook/`, `config/certmanager/` and the
/// `config/default` entries that deploy them, and the network policy that admits the API server's calls.
fn wire_config(plan: &mut Plan, admission: bool) -> Result<()> {
    const DEFAULT: &str = "config/default/kustomization.yaml";
    const POLICIES: &str = "config/network-policy/kustomization.yaml";
    // Projects scaffolded before the policy existed have no marker for it: they go without.
    let has_policies_marker = plan
        .contents(POLICIES)?
        .is_some_and(|text| text.contains("+rustbuilder:scaffold:network-policies"));
    if has_policies_marker {
        plan.insert(Insertion {
            path: POLICIES,
            marker: "network-policies",
            fragment: "- allow-webhook-traffic.yaml".to_string(),
        })?;
    }
    // `init` scaffolds config/certmanager for the metrics certificate, listed but commented out in
    // config/default: webhooks need it, so it is turned on, and the serving certificate joins the metrics
    // one there. Projects from before have neither, and get both lines.
    let certificates = "config/certmanager/kustomization.yaml";
    if plan
        .contents(certificates)?
        .is_some_and(|text| text.contains("+rustbuilder:scaffold:certificates"))
    {
        plan.insert(Insertion {
            path: certificates,
            marker: "certificates",
            fragment: "- certificate.yaml".to_string(),
        })?;
    }
    let listed = plan.contents(DEFAULT)?.is_some_and(|text| {
        text.lines()
            .any(|line| matches!(line.trim_end(), "#- ../certmanager" | "- ../certmanager"))
    });
    if listed {
        plan.edit(DEFAULT, |text| {
            let mut out: String = text
                .lines()
                .map(|line| match line.trim_end() {
                    "#- ../certmanager" => "- ../certmanager",
                    _ => line,
                })
                .collect::<Vec<_>>()
                .join("\n");
            out.push('\n');
            out
        })?;
    }
    plan.insert(Insertion {
        path: DEFAULT,
        marker: "webhookresources",
        fragment: if listed {
            "# The webhook Service (its serving certificate is in ../certmanager).\n- ../webhook"
        } else {
            "# The webhook Service, and the serving certificate cert-manager issues for it.\n- ../webhook\n- ../certmanager"
        }
        .to_string(),
    })?;
    plan.insert(Insertion {
        path: DEFAULT,
        marker: "webhookpatches",
        fragment: "\
# The webhook server: its port, and the certificate mounted from cert-manager's Secret.
- path: manager_webhook_patch.yaml
  target:
    kind: Deployment"
            .to_string(),
    })?;
    // The replacements hold markers of their own: they go in once.
    let has_replacements = plan
        .contents(DEFAULT)?
        .is_some_and(|text| text.contains("+rustbuilder:scaffold:crdcainjectionns"));
    if !has_replacements {
        plan.insert(Insertion {
            path: DEFAULT,
            marker: "webhookreplacements",
            fragment: webhook_replacements(&plan.contents(DEFAULT)?.unwrap_or_default())?,
        })?;
    }
    if admission {
        plan.insert(Insertion {
            path: "config/webhook/kustomization.yaml",
            marker: "webhookmanifests",
            fragment: "- manifests.yaml".to_string(),
        })?;
    }
    Ok(())
}

/// The webhook's replacements for `config/default/kustomization.yaml` (`text`): under the `replacements:`
/// key `init` writes (for the metrics certificate's) when the file has it, with a key of their own
/// otherwise, as projects from before have no such key.
fn webhook_replacements(text: &str) -> Result<String> {
    let partial = scaffold::render("partials/webhook/replacements.yaml", &tera::Context::new())?;
    let has_key = text.lines().any(|line| line.trim_end() == "replacements:");
    Ok(partial
        .lines()
        .filter(|line| !(has_key && *line == "replacements:"))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// Defaulting and validation: the kind's webhook file (whole, or the new webhooks at its markers), its
/// test on a real API server, the modules and the registration in `src/main.rs`.
fn plan_admission(
    plan: &mut Plan,
    base: &ProjectContext,
    api: &WebhookContext,
    existing: &Webhooks,
    options: &WebhookOptions,
    context: &tera::Context,
) -> Result<()> {
    let version_dir = format!("src/webhook/{}{}", api.group_path, api.version);
    let file = format!("{version_dir}/{}.rs", api.kind_snake);
    let mut test_file = format!("tests/webhooks/{}.rs", api.webhook_module);
    // A project of the layout before the webhooks' test crate has the test as a crate of its own.
    let own_crate = format!("tests/{}.rs", api.webhook_test);
    if plan.contents(&test_file)?.is_none() && plan.contents(&own_crate)?.is_some() {
        test_file = own_crate;
    }
    let e2e_file = format!("tests/e2e/{}.rs", api.webhook_test);
    let has_admission = existing.defaulting || existing.validation;
    let new_defaulting = options.defaulting && !existing.defaulting;
    let new_validation = options.validation && !existing.validation;
    // The e2e journey creates the sample `create api` wrote: the project's own kinds only.
    let e2e = api.source == "own";
    if options.force || !has_admission {
        // The whole files, with every webhook the kind has after this command.
        plan.add_set("webhook", context)?;
        plan.add_set("webhook-tests", context)?;
        plan.insert(Insertion {
            path: WEBHOOK_TESTS,
            marker: "modules",
            fragment: format!("mod {};", api.webhook_module),
        })?;
        if e2e {
            plan.add_set("webhook-e2e", context)?;
        }
    } else {
        // The kind has a webhook already: the new one goes in at the markers, next to the user's code.
        let mut fragment = tera::Context::new();
        fragment.extend(context.clone());
        for (new, part) in [(new_defaulting, "defaulter"), (new_validation, "validator")] {
            if !new {
                continue;
            }
            for (path, marker, template) in [
                (&file, "webhooks", format!("{part}.rs.tera")),
                (&file, "webhook-tests", format!("{part}_tests.rs.tera")),
                (
                    &test_file,
                    "webhook-tests",
                    format!("{part}_envtest.rs.tera"),
                ),
                (
                    &e2e_file,
                    "e2e-webhook-checks",
                    format!("{part}_e2e.rs.tera"),
                ),
            ] {
                if path == &e2e_file && !e2e {
                    continue;
                }
                plan.insert(Insertion {
                    path,
                    marker,
                    fragment: scaffold::render(&format!("partials/webhook/{template}"), &fragment)?,
                })?;
            }
            let call = match part {
                "defaulter" => &api.defaulter_call,
                _ => &api.validator_call,
            };
            plan.insert(Insertion {
                path: &test_file,
                marker: "webhooks",
                fragment: format!("    webhooks.{call};"),
            })?;
        }
        let imports = runtime_imports(api.defaulting, api.validation);
        plan.edit(&file, |text| replace_runtime_import(text, &imports))?;
    }

    // The e2e journey's module.
    if e2e {
        plan.insert(Insertion {
            path: "tests/e2e/main.rs",
            marker: "e2e",
            fragment: format!("mod {};", api.webhook_test),
        })?;
    }

    // Modules: src/webhook/mod.rs (and the group's), the version's, and lib.rs.
    plan.insert(Insertion {
        path: "src/lib.rs",
        marker: "modules",
        fragment: "pub mod webhook;".to_string(),
    })?;
    if api.multigroup {
        plan.insert(Insertion {
            path: "src/webhook/mod.rs",
            marker: "groups",
            fragment: format!("pub mod {};", api.group_snake),
        })?;
        plan.insert(Insertion {
            path: &format!("src/webhook/{}/mod.rs", api.group_snake),
            marker: "versions",
            fragment: format!("pub mod {};", api.version),
        })?;
    } else {
        plan.insert(Insertion {
            path: "src/webhook/mod.rs",
            marker: "versions",
            fragment: format!("pub mod {};", api.version),
        })?;
    }
    plan.insert(Insertion {
        path: &format!("{version_dir}/mod.rs"),
        marker: "kinds",
        fragment: format!("pub mod {};", api.kind_snake),
    })?;

    // Registration with the manager.
    plan.insert(Insertion {
        path: "src/main.rs",
        marker: "imports",
        fragment: format!("use {}::webhook;", base.crate_name),
    })?;
    let webhook = format!("{}::{}Webhook", api.webhook_path, api.kind);
    for (on, method, call, path) in [
        (
            options.defaulting,
            "defaulter",
            &api.defaulter_call,
            &api.mutate_path,
        ),
        (
            options.validation,
            "validator",
            &api.validator_call,
            &api.validate_path,
        ),
    ] {
        if !on {
            continue;
        }
        let line = if call.starts_with(&format!("{method}_at(")) {
            format!("    manager.webhooks().{method}_at(\"{path}\", {webhook});")
        } else {
            format!("    manager.webhooks().{method}({webhook});")
        };
        // Scaffolded again (`--force`), maybe at another path: the old registration goes.
        plan.edit("src/main.rs", |text| {
            drop_registration(text, method, &webhook)
        })?;
        plan.insert(Insertion {
            path: "src/main.rs",
            marker: "webhooks",
            fragment: line,
        })?;
    }
    Ok(())
}

/// `text` without the statement that registers `webhook` with `method` (`defaulter`, or
/// `defaulter_at` with a path), however rustfmt wrapped it.
fn drop_registration(text: &str, method: &str, webhook: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut kept = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start().starts_with("manager") {
            let end = (i..lines.len())
                .find(|&j| lines[j].trim_end().ends_with(';'))
                .unwrap_or(i);
            let statement: String = lines[i..=end].concat().split_whitespace().collect();
            let registers = [format!(".{method}("), format!(".{method}_at(")]
                .iter()
                .any(|call| statement.starts_with(&format!("manager.webhooks(){call}")))
                && [format!("{webhook});"), format!("{webhook},);")]
                    .iter()
                    .any(|tail| statement.ends_with(tail.as_str()));
            if registers {
                i = end + 1;
                continue;
            }
        }
        kept.push(lines[i]);
        i += 1;
    }
    let mut out = kept.join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// The names the kind's webhook file imports from the runtime.
fn runtime_imports(defaulting: bool, validation: bool) -> Vec<&'static str> {
    let mut names = vec!["AdmissionRequest"];
    if defaulting {
        names.push("Defaulter");
    }
    names.push("Denied");
    if validation {
        names.extend(["Validation", "Validator"]);
    }
    names
}

/// Adds `names` to the file's `use rustbuilder_runtime::webhook::{...};` line, keeping what the user
/// imports there too.
fn replace_runtime_import(text: &str, names: &[&str]) -> String {
    const PREFIX: &str = "use rustbuilder_runtime::webhook::";
    let Some(start) = text.find(PREFIX) else {
        return text.replacen(
            "\nuse ",
            &format!("\n{PREFIX}{{{}}};\nuse ", names.join(", ")),
            1,
        );
    };
    let Some(len) = text[start..].find(';') else {
        return text.to_string();
    };
    let list = &text[start + PREFIX.len()..start + len];
    let mut all: Vec<String> = list
        .trim_matches(|c: char| c == '{' || c == '}' || c.is_whitespace())
        .split(',')
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .chain(names.iter().map(|n| n.to_string()))
        .collect();
    all.sort_by_key(|n| (n != "self", n.clone()));
    all.dedup();
    let line = if all.len() == 1 {
        format!("{PREFIX}{}", all[0])
    } else {
        format!("{PREFIX}{{{}}}", all.join(", "))
    };
    format!("{}{line}{}", &text[..start], &text[start + len..])
}

/// Conversion: the hub marked as the storage version, a conversion file per spoke, their registration
/// and a test that reads an object at every version.
fn plan_conversion(
    plan: &mut Plan,
    project: &Project,
    base: &ProjectContext,
    api: &WebhookContext,
    options: &WebhookOptions,
    context: &tera::Context,
) -> Result<()> {
    let group_rel = if api.multigroup {
        format!("{}::", api.group_snake)
    } else {
        String::new()
    };
    let is_deploy_image = |version: &str| {
        project
            .resources
            .iter()
            .find(|r| r.group == api.group && r.kind == api.kind && r.version == version)
            .is_some_and(|r| {
                project
                    .plugin_resource(project::DEPLOY_IMAGE_PLUGIN, r)
                    .is_some()
            })
    };
    let hub_deploy_image = is_deploy_image(&api.version);
    // The test reads an object at every version: the spokes the hub had, and the new ones.
    let mut spokes: Vec<String> = project
        .resources
        .iter()
        .find(|r| r.group == api.group && r.kind == api.kind && r.version == api.version)
        .and_then(|r| r.webhooks.as_ref())
        .map(|w| w.spoke.clone())
        .unwrap_or_default();
    for spoke in &options.spokes {
        if !spokes.iter().any(|s| s == spoke.as_str()) {
            spokes.push(spoke.to_string());
        }
    }
    let mut test_context = context.clone();
    test_context.insert("spokes", &spokes);
    plan.add_set("conversion-test", &test_context)?;
    // The admission webhooks of the same command (or of the kind, on disk) may have it already.
    if plan.contents(WEBHOOK_TESTS)?.is_none() {
        plan.add_set("webhook-tests", context)?;
    }
    plan.insert(Insertion {
        path: WEBHOOK_TESTS,
        marker: "modules",
        fragment: format!("mod {}_conversion;", api.kind_file),
    })?;
    plan.insert(Insertion {
        path: "tests/e2e/main.rs",
        marker: "e2e",
        fragment: format!("mod {}_conversion;", api.kind_file),
    })?;
    for spoke in &options.spokes {
        let spoke_deploy_image = is_deploy_image(spoke.as_str());
        // Versions scaffolded alike have the same fields; else only the metadata carries over until
        // the user writes the conversion (the round-trip test says so).
        let (spec_fields, status_fields) = if spoke_deploy_image == hub_deploy_image {
            scaffolded_fields(hub_deploy_image)
        } else {
            (Vec::new(), Vec::new())
        };
        let conversion = ConversionContext {
            spoke: spoke.to_string(),
            spoke_api_path: format!("api::{group_rel}{spoke}"),
            hub: api.version.clone(),
            hub_api_path: api.api_path.clone(),
            spec_fields,
            status_fields,
        };
        let mut spoke_context = context.clone();
        spoke_context.extend(tera::Context::from_serialize(&conversion)?);
        plan.add_set("conversion", &spoke_context)?;
        plan.insert(Insertion {
            path: &format!("src/api/{}{spoke}/mod.rs", api.group_path),
            marker: "kinds",
            fragment: format!("mod {}_conversion;", api.kind_snake),
        })?;
        plan.insert(Insertion {
            path: "src/main.rs",
            marker: "webhooks",
            fragment: format!(
                "    manager.webhooks().conversion::<{}::{}, {}::{}>();",
                conversion.spoke_api_path, api.kind, api.api_path, api.kind
            ),
        })?;
    }
    plan.insert(Insertion {
        path: "src/main.rs",
        marker: "imports",
        fragment: format!("use {}::api;", base.crate_name),
    })?;
    // The hub is the version etcd stores, and the API server calls the webhook to convert.
    const CRDGEN: &str = "src/bin/crdgen.rs";
    let crdgen = plan.contents(CRDGEN)?.unwrap_or_default();
    let storage = format!(
        "storage_version::<api::{group_rel}{}::{}>()",
        api.version, api.kind
    );
    match super::rust::storage_line_of(&crdgen, &group_rel, &api.kind) {
        Some(range) => plan.edit(CRDGEN, |text| {
            let mut text = text.to_string();
            text.replace_range(range, &storage);
            text
        })?,
        None => plan.insert(Insertion {
            path: CRDGEN,
            marker: "crdoptions",
            fragment: super::rust::storage_fragment(&group_rel, &api.kind, &api.version),
        })?,
    }
    plan.insert(Insertion {
        path: CRDGEN,
        marker: "crdoptions",
        fragment: format!(
            "    let crds = crds.conversion_webhook::<api::{group_rel}{}::{}>();",
            api.version, api.kind
        ),
    })?;
    plan.add_set("conversion-config", context)?;
    plan.edit("config/crd/kustomization.yaml", |text| {
        if text.contains("kustomizeconfig.yaml") {
            text.to_string()
        } else {
            format!("{text}\nconfigurations:\n- kustomizeconfig.yaml\n")
        }
    })?;
    // cert-manager writes its CA into the CRD too: the API server calls the conversion webhook over TLS.
    let crd = format!("{}.{}", api.plural, api.qualified_group);
    for (marker, index) in [("crdcainjectionns", 0), ("crdcainjectionname", 1)] {
        plan.insert(Insertion {
            path: "config/default/kustomization.yaml",
            marker,
            fragment: format!(
                "  - select:\n      kind: CustomResourceDefinition\n      name: {crd}\n    fieldPaths:\n    - .metadata.annotations.[cert-manager.io/inject-ca-from]\n    options:\n      delimiter: '/'\n      index: {index}\n      create: true"
            ),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_goes_however_it_was_wrapped() {
        let main = "fn main() {\n    manager.webhooks().defaulter(webhook::v1::pod::PodWebhook);\n    manager\n        .webhooks()\n        .validator_at(\n            \"/check-pods\",\n            webhook::v1::pod::PodWebhook,\n        );\n    manager.webhooks().validator(webhook::v1::pod2::Pod2Webhook);\n}\n";
        let webhook = "webhook::v1::pod::PodWebhook";
        assert_eq!(
            drop_registration(main, "validator", webhook),
            "fn main() {\n    manager.webhooks().defaulter(webhook::v1::pod::PodWebhook);\n    manager.webhooks().validator(webhook::v1::pod2::Pod2Webhook);\n}\n"
        );
        assert_eq!(
            drop_registration(main, "defaulter", webhook),
            main.replace(
                "    manager.webhooks().defaulter(webhook::v1::pod::PodWebhook);\n",
                ""
            )
        );
        assert_eq!(
            drop_registration(main, "defaulter", "webhook::v1::x::XWebhook"),
            main
        );
    }

    #[test]
    fn the_runtime_import_gains_names_and_keeps_the_users() {
        let text = "//! x\n\nuse rustbuilder_runtime::webhook::{AdmissionRequest, Defaulter, Denied};\nuse crate::api::v1::M;\n";
        assert_eq!(
            replace_runtime_import(text, &runtime_imports(true, true)),
            "//! x\n\nuse rustbuilder_runtime::webhook::{AdmissionRequest, Defaulter, Denied, Validation, Validator};\nuse crate::api::v1::M;\n"
        );
        let mine = "use rustbuilder_runtime::webhook::{self, Denied, Warnings};\n";
        assert_eq!(
            replace_runtime_import(mine, &["Defaulter", "Denied"]),
            "use rustbuilder_runtime::webhook::{self, Defaulter, Denied, Warnings};\n"
        );
    }
}
