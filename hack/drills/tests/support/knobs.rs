//! What some drills add to [`Drill::start`](super::Drill::start): flags for a component of the
//! cluster, operator processes with arguments, an identity and a log of their own, and the API
//! server's metrics.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube::Client;
use project::controller::memcached::IMAGE_ENV;
use rustbuilder_envtest::Component;

use super::{IMAGE, NAMESPACE, Operator, operator_binary};

/// Adds `flags` to those `component` starts with (`ENVTEST_<NAME>_FLAGS`, read when the cluster
/// starts). Call it before [`Drill::start`](super::Drill::start).
pub fn add_flags(component: Component, flags: &str) {
    let name = component.name().to_uppercase().replace('-', "_");
    let var = format!("ENVTEST_{name}_FLAGS");
    let all = format!("{} {flags}", std::env::var(&var).unwrap_or_default());
    // SAFETY: each drill is the only test of its binary, and the cluster has not started yet.
    unsafe { std::env::set_var(var, all.trim()) };
}

impl Operator {
    /// An operator process connecting with `kubeconfig`, with `args` after the drills' usual ones,
    /// its output in `<name>.log` next to the cluster's logs.
    pub fn launch(kubeconfig: &Path, name: &str, args: &[&str]) -> Operator {
        let log = kubeconfig.with_file_name(format!("{name}.log"));
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("the operator's log file");
        let child = Command::new(operator_binary())
            .args([
                "--health-probe-bind-address=127.0.0.1:0",
                "--metrics-bind-address=0",
                // The drills read the `reconciled` lines, logged at debug.
                "--log-level=info,rustbuilder_runtime::controller=debug",
            ])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env(IMAGE_ENV, IMAGE)
            .env("POD_NAMESPACE", NAMESPACE)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("the operator starts");
        Operator {
            child,
            kubeconfig: kubeconfig.to_owned(),
            log,
        }
    }

    /// Everything it logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until its log has a line containing `needle`; returns how long that took. Fails the
    /// drill with the log's end after `budget`.
    pub async fn wait_for_log(&self, needle: &str, budget: Duration) -> Duration {
        let since = Instant::now();
        while !self.log_text().contains(needle) {
            assert!(
                since.elapsed() < budget,
                "no {needle:?} in the operator's log within {budget:?}; {}",
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        since.elapsed()
    }
}

/// kube-apiserver's own metrics (Prometheus text), read as admin.
pub async fn apiserver_metrics(client: &Client) -> kube::Result<String> {
    // A named GET on the empty path is `GET /metrics`.
    let request = kube::core::Request::new("").get("metrics", &Default::default());
    let request = request.map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await
}

/// The sum of the samples of `metric` whose labels include every `(name, value)` of `labels`.
pub fn metric_sum(text: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let rest = series.strip_prefix(metric)?;
            let ok = (rest.is_empty() || rest.starts_with('{'))
                && labels
                    .iter()
                    .all(|(name, value)| rest.contains(&format!("{name}=\"{value}\"")));
            ok.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}
