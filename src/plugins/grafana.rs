//! `edit --plugins grafana/v1-alpha`: Grafana dashboards in `grafana/` for the metrics the manager serves.
//!
//! Two dashboards come from `templates/grafana/` as they are: `controller-runtime-metrics.json`
//! (reconciles, errors, durations, busy workers, webhooks, leader election) and
//! `controller-resources-metrics.json` (the `process_*` metrics: CPU, memory, file descriptors). They
//! query only what `rustbuilder-runtime`'s metrics module registers; the runtime crate's
//! `grafana_dashboards` test scrapes a running manager to hold them to that.
//!
//! `grafana/custom-metrics/config.yaml` lists metrics of the user's own (Kubebuilder's format: a list
//! of `{metric, type, expr, unit}` under `customMetrics`). The command writes it once and keeps it; when
//! it lists metrics, each run writes `grafana/custom-metrics/custom-metrics-dashboard.json` from it,
//! one panel per metric.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::project::{self, Project};
use crate::scaffold::{IfExists, Plan};

/// The plugin's name on the command line.
pub const NAME: &str = "grafana/v1-alpha";

/// Where the dashboards go, relative to the project.
pub const DIR: &str = "grafana";

/// The user's list of custom metrics.
pub const CONFIG: &str = "grafana/custom-metrics/config.yaml";

/// The dashboard written from [`CONFIG`].
pub const CUSTOM_DASHBOARD: &str = "grafana/custom-metrics/custom-metrics-dashboard.json";

/// The dashboards of the runtime's metrics, as `templates/grafana/` holds them.
const DASHBOARDS: &[&str] = &[
    "controller-runtime-metrics.json",
    "controller-resources-metrics.json",
];

/// Plans the dashboards of the project at `dir` and records the plugin in PROJECT.
pub fn edit(dir: &Path) -> Result<Plan> {
    let mut project = Project::load(dir)?;
    let mut plan = Plan::new(dir);
    write_dashboards(dir, &mut plan)?;
    project
        .plugins
        .entry(project::GRAFANA_PLUGIN.to_string())
        .or_default();
    plan.add(project::FILE_NAME, project.render(), IfExists::Overwrite);
    Ok(plan)
}

/// The files of the plugin, planned into `plan` for the project at `dir`: the dashboards (rewritten),
/// the config (kept when it exists) and the custom dashboard when the config lists metrics.
fn write_dashboards(dir: &Path, plan: &mut Plan) -> Result<()> {
    let context = tera::Context::new();
    for name in DASHBOARDS {
        let text = crate::scaffold::render(&format!("grafana/{name}"), &context)?;
        plan.add(Path::new(DIR).join(name), text, IfExists::Overwrite);
    }
    let config = match std::fs::read_to_string(dir.join(CONFIG)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = crate::scaffold::render("grafana/custom-metrics/config.yaml", &context)?;
            plan.add(CONFIG, text.clone(), IfExists::Skip);
            text
        }
        Err(e) => return Err(e).with_context(|| format!("failed to read `{CONFIG}`")),
    };
    let metrics = parse_config(&config)?;
    if metrics.is_empty() {
        // Nothing listed (any more): no custom dashboard.
        plan.remove(CUSTOM_DASHBOARD);
    } else {
        plan.add(
            CUSTOM_DASHBOARD,
            custom_dashboard(&metrics)?,
            IfExists::Overwrite,
        );
    }
    Ok(())
}

/// Writes the plugin's files into a project `alpha generate` just scaffolded at `output`, from the
/// project at `input`: the user's custom-metrics config comes along, so its dashboard does too.
pub fn replay(input: &Path, output: &Path) -> Result<()> {
    let config = input.join(CONFIG);
    if config.is_file() {
        let target = output.join(CONFIG);
        std::fs::create_dir_all(target.parent().expect("CONFIG has a parent"))?;
        std::fs::copy(&config, &target)
            .with_context(|| format!("failed to copy `{}`", config.display()))?;
    }
    edit(output)?.apply()?;
    Ok(())
}

/// One metric of the custom-metrics config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct CustomMetric {
    metric: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    expr: Option<String>,
    #[serde(default)]
    unit: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CustomMetricsConfig {
    #[serde(default)]
    custom_metrics: Option<Vec<CustomMetric>>,
}

/// The metrics `config.yaml` lists, checked: a name Prometheus accepts and a known type each.
fn parse_config(text: &str) -> Result<Vec<CustomMetric>> {
    let help = "help: list metrics as `customMetrics: [{metric: <name>, type: counter|gauge|histogram}]` (see the comment at the top of the file), or restore it from version control";
    let config: Option<CustomMetricsConfig> = serde_yaml::from_str(text)
        .with_context(|| format!("`{CONFIG}` is not a custom-metrics list\n{help}"))?;
    let metrics = config.and_then(|c| c.custom_metrics).unwrap_or_default();
    for (i, m) in metrics.iter().enumerate() {
        let valid_name = m.metric.chars().enumerate().all(|(j, c)| {
            c.is_ascii_alphabetic() || c == '_' || c == ':' || (j > 0 && c.is_ascii_digit())
        });
        if m.metric.is_empty() || !valid_name {
            bail!(
                "`{CONFIG}`: metric {} has the name {:?}, which is not a Prometheus metric name\nhelp: use letters, digits (not first), `_` and `:`, as /metrics shows the name",
                i + 1,
                m.metric
            );
        }
        if !matches!(m.kind.as_str(), "counter" | "gauge" | "histogram") {
            bail!(
                "`{CONFIG}`: `{}` has the type `{}`\nhelp: the type is `counter`, `gauge` or `histogram`",
                m.metric,
                m.kind
            );
        }
    }
    Ok(metrics)
}

/// The series selector every panel filters with: the dashboard's namespace and job variables.
const SELECTOR: &str = r#"{job="$job", namespace="$namespace"}"#;

/// The panel's PromQL: the config's `expr`, else what suits the type.
fn default_expr(m: &CustomMetric) -> String {
    if let Some(expr) = &m.expr {
        return expr.clone();
    }
    match m.kind.as_str() {
        "counter" => format!(
            "sum by (pod) (rate({}{SELECTOR}[$__rate_interval]))",
            m.metric
        ),
        "histogram" => {
            let base = m.metric.strip_suffix("_bucket").unwrap_or(&m.metric);
            format!(
                "histogram_quantile(0.90, sum by (pod, le) (rate({base}_bucket{SELECTOR}[$__rate_interval])))"
            )
        }
        _ => format!("sum by (pod) ({}{SELECTOR})", m.metric),
    }
}

/// The custom-metrics dashboard: the same variables as the runtime dashboards, one panel per metric.
fn custom_dashboard(metrics: &[CustomMetric]) -> Result<String> {
    let datasource = json!({"type": "prometheus", "uid": "${datasource}"});
    let panels: Vec<Value> = metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let unit = m.unit.clone().unwrap_or_else(|| "short".into());
            // Two panels a row, 8 high.
            let (x, y) = ((i % 2) * 12, (i / 2) * 8);
            json!({
                "id": i + 1,
                "type": "timeseries",
                "title": format!("{} ({})", m.metric, m.kind),
                "datasource": datasource,
                "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
                "fieldConfig": {
                    "defaults": {"unit": unit, "custom": {"drawStyle": "line", "fillOpacity": 10, "lineWidth": 2, "showPoints": "never"}},
                    "overrides": [],
                },
                "options": {
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": true},
                    "tooltip": {"mode": "multi", "sort": "desc"},
                },
                "targets": [{
                    "datasource": datasource,
                    "expr": default_expr(m),
                    "legendFormat": "{{pod}}",
                    "range": true,
                    "refId": "A",
                }],
            })
        })
        .collect();
    // The variables are the runtime dashboards' own, so the three dashboards select alike.
    let runtime: Value = serde_json::from_str(&crate::scaffold::render(
        "grafana/controller-runtime-metrics.json",
        &tera::Context::new(),
    )?)?;
    let dashboard = json!({
        "title": "Custom Metrics",
        "description": format!("The metrics `{CONFIG}` lists, one panel each. Generated by `rustbuilder edit --plugins grafana/v1-alpha`: edit the config and run it again."),
        "tags": ["rustbuilder", "operator"],
        "editable": true,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "timepicker": {},
        "links": [],
        "annotations": {"list": []},
        "templating": runtime["templating"].clone(),
        "panels": panels,
    });
    Ok(serde_json::to_string_pretty(&dashboard)? + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PromQL of every panel of a dashboard.
    fn queried(dashboard: &Value) -> Vec<String> {
        let mut exprs = Vec::new();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                exprs.push(target["expr"].as_str().unwrap().to_string());
            }
        }
        exprs
    }

    #[test]
    fn the_embedded_dashboards_are_grafana_dashboards() {
        for name in DASHBOARDS {
            let text =
                crate::scaffold::render(&format!("grafana/{name}"), &tera::Context::new()).unwrap();
            let dashboard: Value = serde_json::from_str(&text).unwrap();
            assert!(dashboard["title"].is_string(), "{name}");
            assert!(dashboard["schemaVersion"].is_u64(), "{name}");
            let variables: Vec<&str> = dashboard["templating"]["list"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["name"].as_str().unwrap())
                .collect();
            assert_eq!(variables, ["datasource", "namespace", "job"], "{name}");
            let panels = dashboard["panels"].as_array().unwrap();
            let mut ids: Vec<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), panels.len(), "{name}: panel ids repeat");
            for panel in panels.iter().filter(|p| p["type"] != "row") {
                let targets = panel["targets"].as_array().unwrap();
                assert!(!targets.is_empty(), "{name}: {panel}");
                assert_eq!(panel["datasource"]["uid"], "${datasource}", "{name}");
                assert!(panel["gridPos"]["w"].as_u64().unwrap() <= 24, "{name}");
            }
            assert!(!queried(&dashboard).is_empty());
        }
    }

    #[test]
    fn custom_metrics_become_panels_with_default_queries() {
        let config = "customMetrics:\n  - metric: cache_misses_total\n    type: counter\n    unit: ops\n  - metric: backup_seconds\n    type: histogram\n  - metric: queue_depth\n    type: gauge\n    expr: max(queue_depth)\n";
        let metrics = parse_config(config).unwrap();
        let dashboard: Value = serde_json::from_str(&custom_dashboard(&metrics).unwrap()).unwrap();
        assert_eq!(
            queried(&dashboard),
            [
                r#"sum by (pod) (rate(cache_misses_total{job="$job", namespace="$namespace"}[$__rate_interval]))"#,
                r#"histogram_quantile(0.90, sum by (pod, le) (rate(backup_seconds_bucket{job="$job", namespace="$namespace"}[$__rate_interval])))"#,
                "max(queue_depth)",
            ]
        );
        let panels = dashboard["panels"].as_array().unwrap();
        assert_eq!(panels[0]["fieldConfig"]["defaults"]["unit"], "ops");
        assert_eq!(panels[1]["fieldConfig"]["defaults"]["unit"], "short");
        assert_eq!(panels[2]["gridPos"]["y"], 8);
        assert_eq!(panels[1]["title"], "backup_seconds (histogram)");
    }

    #[test]
    fn an_empty_or_commented_config_lists_nothing() {
        assert!(parse_config("customMetrics:\n").unwrap().is_empty());
        assert!(parse_config("# only comments\n").unwrap().is_empty());
        assert!(parse_config("customMetrics: []\n").unwrap().is_empty());
    }

    #[test]
    fn a_bad_config_is_refused_with_what_to_do() {
        for (config, expected) in [
            (
                "customMetrics:\n  - metric: x\n    type: summary\n",
                "has the type `summary`",
            ),
            (
                "customMetrics:\n  - metric: 9lives\n    type: gauge\n",
                "not a Prometheus metric name",
            ),
            (
                "customMetrics:\n  - metric: x\n",
                "not a custom-metrics list",
            ),
            ("metrics: []\n", "not a custom-metrics list"),
        ] {
            let err = format!("{:#}", parse_config(config).unwrap_err());
            assert!(err.contains(expected), "{config}: {err}");
            assert!(err.contains("help:"), "{err}");
        }
    }
}
