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

use super::rust::ProjectContext;
use crate::model::{Domain, Group, Kind, Version};
use crate::project::{self, Project, Resource, Webhooks};
use crate::scaffold::{self, Insertion, Plan};

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
    pub force: bool,
}

/// Values the webhook templates see, on top of the project's.
#[derive(Debug, Serialize)]
struct WebhookContext {
    group: String,
    group_snake: String,
    qualified_group: String,
    version: String,
    kind: String,
    kind_snake: String,
    /// The stem of the kind's files outside its module: `memcached`, or `cache_memcached` (multigroup).
    kind_file: String,
    kind_lower: String,
    plural: String,
    /// The plural as a Rust identifier.
    plural_snake: String,
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
    /// The stem of the tests' files, one per version of a kind: `memcached_v1alpha1_webhook`.
    webhook_test: String,
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
    let mut project = Project::load(dir)?;
    let domain: Domain = project.domain.parse()?;
    let qualified_group = options.group.qualified(&domain)?;
    let (group, version, kind) = (&options.group, &options.version, &options.kind);
    let gvk = format!("`{qualified_group}/{version}, Kind={kind}`");

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
    let Some(resource) = project
        .find(group, version, kind)
        .filter(|r| r.api.is_some())
        .cloned()
    else {
        bail!(
            "no API for {gvk} in PROJECT: a webhook needs the type it is called for\nhelp: run `rustbuilder create api --group {group} --version {version} --kind {kind}` first"
        );
    };
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
    if options.conversion {
        check_conversion(&project, options, &gvk, &other_versions)?;
    }

    let existing = resource.webhooks.clone().unwrap_or_default();
    if !options.force {
        let file = webhook_file(project.multigroup, group, version, kind);
        for (asked, had, what, location) in [
            (options.defaulting, existing.defaulting, "defaulting", &file),
            (options.validation, existing.validation, "validation", &file),
            (
                options.conversion,
                existing.conversion,
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

    let base = ProjectContext::new(&project)?;
    let multigroup = project.multigroup;
    let group_snake = group.snake();
    let (group_path, group_rel) = if multigroup {
        (format!("{group_snake}/"), format!("{group_snake}::"))
    } else {
        (String::new(), String::new())
    };
    let plural = match &resource.plural {
        Some(p) => p.clone(),
        None => kind.default_plural().to_string(),
    };
    let kind_lower = kind.as_str().to_lowercase();
    let route = format!(
        "{}-{version}-{kind_lower}",
        qualified_group.replace('.', "-")
    );
    // What the kind's webhook file holds after this command, and what it gains.
    let defaulting = existing.defaulting || options.defaulting;
    let validation = existing.validation || options.validation;
    let api = WebhookContext {
        group: group.to_string(),
        group_snake: group_snake.clone(),
        qualified_group: qualified_group.clone(),
        version: version.to_string(),
        kind: kind.to_string(),
        kind_snake: kind.snake(),
        kind_file: super::rust::group_prefix(multigroup, &group_snake, &kind.snake()),
        kind_lower: kind_lower.clone(),
        plural_snake: plural.replace('-', "_"),
        plural,
        group_rel: group_rel.clone(),
        api_path: format!("api::{group_rel}{version}"),
        webhook_path: format!("webhook::{group_rel}{version}::{}", kind.snake()),
        mutate_path: format!("/mutate-{route}"),
        validate_path: format!("/validate-{route}"),
        webhook_test: format!(
            "{}_{version}_webhook",
            super::rust::group_prefix(multigroup, &group_snake, &kind.snake())
        ),
        group_path,
        defaulting,
        validation,
        multigroup,
    };
    let mut context = tera::Context::from_serialize(&base)?;
    context.extend(tera::Context::from_serialize(&api)?);

    let mut plan = Plan::new(dir);
    plan.add_set("webhook-config", &context)?;
    if multigroup && (options.defaulting || options.validation) {
        plan.add_set("webhook-group", &context)?;
    }
    wire_config(&mut plan, options.defaulting || options.validation)?;
    if options.defaulting || options.validation {
        plan_admission(&mut plan, &base, &api, &existing, options, &context)?;
    }
    if options.conversion {
        plan_conversion(&mut plan, &project, &base, &api, options, &context)?;
    }

    let mut webhooks = Webhooks {
        conversion: existing.conversion || options.conversion,
        defaulting,
        defaulting_path: existing.defaulting_path.clone(),
        spoke: existing.spoke.clone(),
        validation,
        validation_path: existing.validation_path.clone(),
        webhook_version: WEBHOOK_VERSION.to_string(),
    };
    for spoke in &options.spokes {
        if !webhooks.spoke.iter().any(|s| s == spoke.as_str()) {
            webhooks.spoke.push(spoke.to_string());
        }
    }
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
/// `config/default` entries that deploy them.
fn wire_config(plan: &mut Plan, admission: bool) -> Result<()> {
    const DEFAULT: &str = "config/default/kustomization.yaml";
    plan.insert(Insertion {
        path: DEFAULT,
        marker: "webhookresources",
        fragment: "\
# The webhook Service, and the serving certificate cert-manager issues for it.
- ../webhook
- ../certmanager"
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
            fragment: scaffold::render(
                "partials/webhook/replacements.yaml",
                &tera::Context::new(),
            )?
            .trim_end()
            .to_string(),
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
    let test_file = format!("tests/{}.rs", api.webhook_test);
    let e2e_file = format!("tests/e2e/{}.rs", api.webhook_test);
    let has_admission = existing.defaulting || existing.validation;
    let new_defaulting = options.defaulting && !existing.defaulting;
    let new_validation = options.validation && !existing.validation;
    if options.force || !has_admission {
        // The whole files, with every webhook the kind has after this command.
        plan.add_set("webhook", context)?;
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
                plan.insert(Insertion {
                    path,
                    marker,
                    fragment: scaffold::render(&format!("partials/webhook/{template}"), &fragment)?,
                })?;
            }
            plan.insert(Insertion {
                path: &test_file,
                marker: "webhooks",
                fragment: format!("    webhooks.{part}({}Webhook);", api.kind),
            })?;
        }
        let imports = runtime_imports(api.defaulting, api.validation);
        plan.edit(&file, |text| replace_runtime_import(text, &imports))?;
    }

    // The e2e journey's module.
    plan.insert(Insertion {
        path: "tests/e2e/main.rs",
        marker: "e2e",
        fragment: format!("mod {};", api.webhook_test),
    })?;

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
    for (on, method) in [
        (options.defaulting, "defaulter"),
        (options.validation, "validator"),
    ] {
        if on {
            plan.insert(Insertion {
                path: "src/main.rs",
                marker: "webhooks",
                fragment: format!("    manager.webhooks().{method}({webhook});"),
            })?;
        }
    }
    Ok(())
}

/// The names the kind's webhook file imports from the runtime.
fn runtime_imports(defaulting: bool, validation: bool) -> Vec<&'static str> {
    let mut names = Vec::new();
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
    fn the_runtime_import_gains_names_and_keeps_the_users() {
        let text = "//! x\n\nuse rustbuilder_runtime::webhook::{Defaulter, Denied};\nuse crate::api::v1::M;\n";
        assert_eq!(
            replace_runtime_import(text, &runtime_imports(true, true)),
            "//! x\n\nuse rustbuilder_runtime::webhook::{Defaulter, Denied, Validation, Validator};\nuse crate::api::v1::M;\n"
        );
        let mine = "use rustbuilder_runtime::webhook::{self, Denied, Warnings};\n";
        assert_eq!(
            replace_runtime_import(mine, &["Defaulter", "Denied"]),
            "use rustbuilder_runtime::webhook::{self, Defaulter, Denied, Warnings};\n"
        );
    }
}
