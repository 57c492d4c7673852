//! The Grafana dashboards `rustbuilder edit --plugins grafana/v1-alpha` writes (the repository's
//! `templates/grafana/`) query only metrics a manager serves: a manager process on a real API server,
//! leading and reconciling, is scraped, and every metric name in every dashboard query must be among
//! the series its /metrics shows. The example manager serves no webhooks, so the webhook series come
//! from the same metrics module after one recorded call, as the webhook server records it.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::metrics::Metrics;
use serde_json::Value;
use support::{ManagerProcess, Scheme, eventually, free_address, get};

/// The dashboards as the CLI embeds them.
fn dashboards() -> Vec<(PathBuf, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/grafana");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    found.sort();
    assert!(found.len() >= 2, "no dashboards in {}", dir.display());
    found
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            (path, json)
        })
        .collect()
}

/// Every PromQL query of a dashboard: the panels' targets and the template variables' queries.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(
                target["expr"]
                    .as_str()
                    .expect("a target has an expr")
                    .into(),
            );
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] == "query" {
            out.push(variable["query"]["query"].as_str().unwrap().into());
        }
    }
    out
}

/// Words of PromQL that are not metric names: the aggregation operators (followed by `by (...)` as often
/// as by their argument) and the keywords.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
];

/// The metric names a query reads: identifiers outside label matchers, ranges and strings that are
/// neither functions (followed by `(`), keywords, nor the label lists of `by (...)` and the like.
/// `label_values(metric{...}, label)` (a Grafana variable query) reads its first argument only.
fn metric_names(query: &str) -> BTreeSet<String> {
    // Drop what is between quotes, braces and brackets.
    let mut text = String::new();
    let mut closing: Option<char> = None;
    for c in query.chars() {
        match closing {
            Some(end) if c == end => closing = None,
            Some(_) => {}
            None => match c {
                '"' => closing = Some('"'),
                '{' => closing = Some('}'),
                '[' => closing = Some(']'),
                _ => text.push(c),
            },
        }
    }
    let text = match text.strip_prefix("label_values(") {
        Some(rest) => rest.split(',').next().unwrap_or_default().to_string(),
        None => text,
    };
    let chars: Vec<char> = text.chars().collect();
    let mut names = BTreeSet::new();
    let mut skip_group = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            if KEYWORDS.contains(&word.as_str()) {
                // `by (a, b)`: the group after it holds labels.
                skip_group = matches!(
                    word.as_str(),
                    "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                );
            } else if next != Some(&'(') && !(start > 0 && chars[start - 1] == '$') {
                names.insert(word);
            }
            continue;
        }
        if c == '(' && skip_group {
            skip_group = false;
            let close = chars[i..]
                .iter()
                .position(|c| *c == ')')
                .expect("a closed group");
            i += close + 1;
            continue;
        }
        if c.is_ascii_digit() || c == '.' {
            // Numbers (0.99) and durations (5m) are not names.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            continue;
        }
        i += 1;
    }
    names
}

/// The series names a /metrics text declares: from its `# TYPE` lines (a family with no sample yet,
/// like the webhook metrics before the first call, is still declared), with the suffixes the samples of
/// each type carry, and the names of the samples themselves.
fn served(metrics: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in metrics.lines() {
        if let Some(declaration) = line.strip_prefix("# TYPE ") {
            let mut parts = declaration.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                _ => &[""],
            };
            for suffix in suffixes {
                let full = if name.ends_with(suffix) {
                    name.to_string()
                } else {
                    format!("{name}{suffix}")
                };
                names.insert(full);
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// `(dashboard, metric)` for every metric a dashboard queries that `served` lacks.
fn missing(dashboards: &[(PathBuf, Value)], served: &BTreeSet<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, dashboard) in dashboards {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let queries = queries(dashboard);
        assert!(!queries.is_empty(), "{file} has no queries");
        for query in queries {
            for name in metric_names(&query) {
                if !served.contains(&name) {
                    out.push((file.clone(), name));
                }
            }
        }
    }
    out
}

#[test]
fn metric_names_are_read_out_of_promql() {
    let names = |q: &str| metric_names(q).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (controller, le) (rate(a_bucket{job="$job"}[$__rate_interval])))"#
        ),
        ["a_bucket"]
    );
    assert_eq!(
        names("sum by (c) (rate(a_sum[5m])) / sum by (c) (rate(a_count[5m]))"),
        ["a_count", "a_sum"]
    );
    assert_eq!(names("time() - max by (pod) (b{x=\"y\"})"), ["b"]);
    assert_eq!(
        names(r#"label_values(c_total{namespace="$namespace"}, job)"#),
        ["c_total"]
    );
    assert_eq!(names("a unless on (pod) b offset 5m"), ["a", "b"]);
}

#[test]
fn a_query_of_a_metric_the_manager_lacks_is_found() {
    let served = served(
        "# TYPE controller_runtime_reconcile counter\ncontroller_runtime_reconcile_total{controller=\"a\",result=\"success\"} 1\n\
         # TYPE controller_runtime_webhook_latency_seconds histogram\n# EOF\n",
    );
    assert!(served.contains("controller_runtime_reconcile_total"));
    assert!(served.contains("controller_runtime_webhook_latency_seconds_bucket"));
    let dashboard = serde_json::json!({"panels": [{"targets": [
        {"expr": "sum(rate(controller_runtime_reconcile_total[5m]))"},
        {"expr": "sum(workqueue_depth{job=\"$job\"})"},
        {"expr": "rate(controller_runtime_reconcile[5m])"},
    ]}]});
    let dashboards = [(PathBuf::from("d.json"), dashboard)];
    assert_eq!(
        missing(&dashboards, &served),
        [
            ("d.json".to_string(), "workqueue_depth".to_string()),
            (
                "d.json".to_string(),
                "controller_runtime_reconcile".to_string()
            ),
        ]
    );
}

#[tokio::test]
async fn every_dashboard_query_reads_metrics_the_manager_serves() {
    let dashboards = dashboards();
    let env = TestEnv::start().await;
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_address();
    let args = [
        format!("--metrics-bind-address={metrics}"),
        "--metrics-secure=false".into(),
        "--health-probe-bind-address=0".into(),
        "--leader-elect".into(),
    ];
    let manager = ManagerProcess::start("grafana", dir.path(), env.kubeconfig(), &args);
    // A reconcile, so the duration histogram has samples, and the lease, so the leader status has one.
    support::create_source(&env.client(), "default", "seen", &[("a", "1")]).await;
    let mut body = String::new();
    let scraped = async || match get(metrics, &Scheme::Http, "/metrics", None).await {
        Ok((200, text))
            if text.contains("leader_election_master_status{")
                && text.contains("controller_runtime_reconcile_time_seconds_count{") =>
        {
            body = text;
            true
        }
        _ => false,
    };
    assert!(
        eventually(Duration::from_secs(60), scraped).await,
        "the manager never served leader and reconcile metrics:\n{}\n{}",
        body,
        manager.log_text()
    );
    let webhooks = Metrics::new();
    webhooks.observe_webhook(
        "/validate-example-com-v1-thing",
        200,
        Duration::from_millis(3),
    );
    body.push_str(&webhooks.encode());
    let served = served(&body);
    let missing = missing(&dashboards, &served);
    assert!(
        missing.is_empty(),
        "dashboards query metrics the manager does not serve: {missing:?}\nserved: {served:?}"
    );
}
