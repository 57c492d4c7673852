//! The series of a fleet's clusters, served beside the process's own with a `cluster` label.
//!
//! Each engaged cluster's manager counts into [`Metrics`] of its own (a registry of the same
//! families, without the `process_*` ones). The process's metrics hold the clusters served
//! ([`Metrics::serve_cluster`]); at each scrape every cluster's text is merged into the process's,
//! family by family, each of its samples labelled `cluster="<name>"`. The process's own samples
//! are written as they are, so their label sets do not change. A cluster's series go with the
//! [`ServedCluster`] guard: nothing is left to search for and remove label by label.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::Metrics;

/// Whether a cluster is ready, asked at each scrape for `fleet_cluster_ready`.
pub(crate) type ReadyCheck = Arc<dyn Fn() -> bool + Send + Sync>;

/// The clusters whose series the process serves, in the order they were added.
#[derive(Default)]
pub(super) struct ServedClusters {
    next_id: AtomicU64,
    entries: Mutex<Vec<Entry>>,
}

struct Entry {
    id: u64,
    name: String,
    metrics: Metrics,
    ready: ReadyCheck,
}

/// Keeps one cluster's series on the process's `/metrics`; dropped, they are gone at the next
/// scrape. Made by [`Metrics::serve_cluster`].
#[must_use = "the cluster's series are removed when this is dropped"]
pub struct ServedCluster {
    clusters: Weak<ServedClusters>,
    id: u64,
}

impl Drop for ServedCluster {
    fn drop(&mut self) {
        if let Some(clusters) = self.clusters.upgrade() {
            clusters.entries().retain(|entry| entry.id != self.id);
        }
    }
}

impl ServedClusters {
    fn entries(&self) -> MutexGuard<'_, Vec<Entry>> {
        // Pushing to or retaining in a Vec cannot leave it half-done.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn add(
        self: &Arc<Self>,
        name: &str,
        metrics: Metrics,
        ready: ReadyCheck,
    ) -> ServedCluster {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.entries().push(Entry {
            id,
            name: name.to_string(),
            metrics,
            ready,
        });
        ServedCluster {
            clusters: Arc::downgrade(self),
            id,
        }
    }

    /// `process` (one registry's text, ending in `# EOF`) with every served cluster's samples
    /// added to their families, and the `fleet_cluster_ready` gauge. Of two clusters with one name
    /// (engaged by two fleets), the first added is served.
    pub(super) fn merge_into(&self, process: String) -> String {
        // Encoded outside the lock: a cluster's encoding reads its own work queues.
        let served: Vec<(String, Metrics, ReadyCheck)> = {
            let mut seen = BTreeSet::new();
            let entries = self.entries();
            let unique = entries.iter().filter(|e| seen.insert(e.name.clone()));
            unique
                .map(|e| (e.name.clone(), e.metrics.clone(), e.ready.clone()))
                .collect()
        };
        if served.is_empty() {
            return process;
        }
        // Each family's cluster samples, by family name, with its header as a cluster writes it
        // (the process writes no family that has no samples).
        let mut extra: BTreeMap<&str, Extra> = BTreeMap::new();
        let texts: Vec<(String, String)> = served
            .iter()
            .map(|(name, metrics, _)| {
                (
                    format!("cluster=\"{}\"", escape(name)),
                    metrics.encode_own(),
                )
            })
            .collect();
        let mut order = Vec::new();
        for (label, text) in &texts {
            for (family, header, samples) in families(text) {
                let family = extra.entry(family).or_insert_with(|| {
                    order.push(family);
                    Extra {
                        header,
                        samples: String::new(),
                    }
                });
                for sample in samples {
                    family.samples.push_str(&labelled(sample, label));
                    family.samples.push('\n');
                }
            }
        }
        let mut merged = String::with_capacity(process.len() * 2);
        let mut current: Option<&str> = None;
        for line in process.lines() {
            let starts = family_of(line).filter(|family| Some(*family) != current);
            if starts.is_some() || line == "# EOF" {
                if let Some(family) = current.and_then(|family| extra.remove(family)) {
                    merged.push_str(&family.samples);
                }
                current = starts;
            }
            if line == "# EOF" {
                // The families only clusters have samples in, then whether each is ready.
                for family in order.iter().filter_map(|name| extra.remove(name)) {
                    if !family.samples.is_empty() {
                        merged.push_str(&family.header);
                        merged.push_str(&family.samples);
                    }
                }
                merged.push_str(&ready_family(&served));
            }
            merged.push_str(line);
            merged.push('\n');
        }
        merged
    }
}

/// One family's header and samples from the clusters.
struct Extra {
    header: String,
    samples: String,
}

/// The `fleet_cluster_ready` family: 1 for each cluster whose caches have synced, else 0.
fn ready_family(served: &[(String, Metrics, ReadyCheck)]) -> String {
    let mut text = String::from(
        "# HELP fleet_cluster_ready 1 once an engaged cluster's caches have synced, else 0.\n\
         # TYPE fleet_cluster_ready gauge\n",
    );
    for (name, _, ready) in served {
        let value = u8::from(ready());
        text.push_str(&format!(
            "fleet_cluster_ready{{cluster=\"{}\"}} {value}\n",
            escape(name)
        ));
    }
    text
}

/// The family a `# HELP`, `# TYPE` or `# UNIT` line describes.
fn family_of(line: &str) -> Option<&str> {
    let rest = line
        .strip_prefix("# HELP ")
        .or_else(|| line.strip_prefix("# TYPE "))
        .or_else(|| line.strip_prefix("# UNIT "))?;
    rest.split(' ').next()
}

/// The families of `text`, each with its header (`# HELP`, `# TYPE`, `# UNIT` lines) and its
/// samples.
fn families(text: &str) -> Vec<(&str, String, Vec<&str>)> {
    let mut found: Vec<(&str, String, Vec<&str>)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = family_of(line) {
            match found.last_mut() {
                Some((family, header, _)) if *family == name => {
                    header.push_str(line);
                    header.push('\n');
                }
                _ => found.push((name, format!("{line}\n"), Vec::new())),
            }
        } else if let Some((_, _, samples)) = found.last_mut()
            && !line.starts_with('#')
            && !line.is_empty()
        {
            samples.push(line);
        }
    }
    found
}

/// `sample` with `label` first among its labels: `a{b="c"} 1` becomes `a{label,b="c"} 1`.
fn labelled(sample: &str, label: &str) -> String {
    // A metric name holds neither `{` nor a space; what follows it is its labels or its value.
    match sample.find(['{', ' ']) {
        Some(at) if sample[at..].starts_with("{}") => {
            format!("{}{{{label}}}{}", &sample[..at], &sample[at + 2..])
        }
        Some(at) if sample[at..].starts_with('{') => {
            format!("{}{{{label},{}", &sample[..at], &sample[at + 1..])
        }
        Some(at) => format!("{}{{{label}}}{}", &sample[..at], &sample[at..]),
        None => sample.to_string(),
    }
}

/// A label value as the text format writes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_go_first() {
        let label = r#"cluster="east""#;
        assert_eq!(
            labelled(r#"a_total{controller="x"} 1"#, label),
            r#"a_total{cluster="east",controller="x"} 1"#
        );
        assert_eq!(labelled("a 1", label), r#"a{cluster="east"} 1"#);
        assert_eq!(labelled("a{} 1", label), r#"a{cluster="east"} 1"#);
        assert_eq!(escape("a\"b\\c"), r#"a\"b\\c"#);
    }

    fn sample_lines(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn clusters_join_the_process_families_and_leave_with_their_guard() {
        let process = Metrics::new();
        process.controller("fleet", 1);
        let alone = process.encode();
        let east = Metrics::of_cluster();
        east.controller("widget", 2);
        let served = process.serve_cluster("east", east, Arc::new(|| true));
        let west = Metrics::of_cluster();
        west.controller("widget", 2);
        let unready = process.serve_cluster("west", west, Arc::new(|| false));
        let merged = process.encode();

        // The process's own samples are all there, as they were.
        let merged_samples = sample_lines(&merged);
        for line in sample_lines(&alone) {
            if !line.starts_with("process_") {
                assert!(
                    merged_samples.contains(&line),
                    "{line} missing in\n{merged}"
                );
            }
        }
        // Each cluster's series are in the process's family, labelled.
        let max =
            r#"controller_runtime_max_concurrent_reconciles{cluster="east",controller="widget"} 2"#;
        assert!(merged.contains(max), "{merged}");
        assert!(merged.contains(r#"fleet_cluster_ready{cluster="east"} 1"#));
        assert!(merged.contains(r#"fleet_cluster_ready{cluster="west"} 0"#));
        // One header per family, and the clusters' samples follow their own family's header.
        let types: Vec<&str> = merged
            .lines()
            .filter(|l| l.starts_with("# TYPE "))
            .collect();
        let unique: BTreeSet<&&str> = types.iter().collect();
        assert_eq!(types.len(), unique.len(), "a family twice in\n{merged}");
        let header = merged
            .find("# TYPE controller_runtime_max_concurrent_reconciles ")
            .unwrap();
        let next_header = header + 1 + merged[header + 1..].find("# HELP").unwrap();
        assert!(merged[header..next_header].contains(max), "{merged}");
        assert!(merged.ends_with("# EOF\n"));
        // No process figures per cluster.
        assert!(!merged.contains(r#"process_resident_memory_bytes{cluster"#));

        drop(served);
        let after = process.encode();
        assert!(!after.contains(r#"cluster="east""#), "{after}");
        assert!(after.contains(r#"cluster="west""#));
        drop(unready);
        let none = process.encode();
        assert!(!none.contains("cluster="), "{none}");
        assert!(!none.contains("fleet_cluster_ready"), "{none}");
    }

    #[test]
    fn of_two_clusters_of_one_name_the_first_is_served() {
        let process = Metrics::new();
        let first = Metrics::of_cluster();
        first.controller("widget", 1);
        let second = Metrics::of_cluster();
        second.controller("widget", 9);
        let _first = process.serve_cluster("east", first, Arc::new(|| true));
        let _second = process.serve_cluster("east", second, Arc::new(|| false));
        let merged = process.encode();
        let east: Vec<&str> = merged
            .lines()
            .filter(|l| l.starts_with("controller_runtime_max_concurrent_reconciles{"))
            .collect();
        assert_eq!(
            east,
            [
                r#"controller_runtime_max_concurrent_reconciles{cluster="east",controller="widget"} 1"#
            ]
        );
        assert!(merged.contains(r#"fleet_cluster_ready{cluster="east"} 1"#));
        // The process has no controller: the family comes with the cluster's header, once.
        let header = "# TYPE controller_runtime_max_concurrent_reconciles gauge";
        assert_eq!(merged.matches(header).count(), 1, "{merged}");
    }
}
