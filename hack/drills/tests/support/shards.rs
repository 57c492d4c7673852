//! What the sharding drills add: kube-apiserver's audit log, and the proof read from it that no two
//! replicas ever worked on one object at the same time.
//!
//! The proof does not take the operator's word. From the audit log (written by the API server) it
//! reads, for each replica, the hash ranges it published in its shard Lease and when, and every write
//! it made to a `Memcached`'s status or Deployment (the replica is told by its `User-Agent`). An
//! object's hash is the 64-bit FNV-1a of its `Memcached`'s uid, as the API server's shard selector
//! hashes it. Two things must hold:
//!
//! 1. every write a replica made to an object was received while the replica published the object's
//!    hash (counted from the answer to the publication until the withdrawal was received);
//! 2. of two consecutive writes to one object by different replicas, the first replica withdrew the
//!    object's hash (or its Lease expired) in between, as the API server recorded it.
//!
//! So an object's writers take turns, each handing it over before the next one writes: two replicas
//! working on one object at once would write it in turn without a withdrawal in between. (A
//! publication alone does not make a replica the holder: a replica claims a range by publishing it and
//! starts only once no one else publishes it, so claims may overlap for a moment; work may not.)

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::str::FromStr;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;

/// The annotation in which a replica publishes the ranges it works on (`0x<start>-0x<end>,…`).
const RANGES_ANNOTATION: &str = "rustbuilder.io/shard-ranges";

/// kube-apiserver's audit policy for the drill: the shard Leases with their content, and the
/// operator's writes to Deployments and `Memcached` statuses by name only.
pub const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Request
  resources: [{group: "coordination.k8s.io", resources: ["leases"]}]
  verbs: ["create", "update", "patch", "delete"]
  namespaces: ["drill"]
- level: Metadata
  resources:
  - {group: "apps", resources: ["deployments"]}
  - {group: "cache.example.com", resources: ["memcacheds/status"]}
  verbs: ["create", "update", "patch"]
  namespaces: ["drill"]
- level: None
"#;

/// The 64-bit FNV-1a hash, as the API server's shard selector hashes `metadata.uid`.
pub fn hash(uid: &str) -> u64 {
    uid.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `0x<start>-0x<end>` terms separated by commas: half-open ranges of the hash space.
fn parse_ranges(text: &str) -> Vec<(u128, u128)> {
    let bound = |hex: &str| u128::from_str_radix(hex.trim().trim_start_matches("0x"), 16);
    text.split(',')
        .filter(|term| !term.trim().is_empty())
        .map(|term| {
            let (start, end) = term.split_once('-').expect("a range is `start-end`");
            (bound(start).expect("hex"), bound(end).expect("hex"))
        })
        .collect()
}

fn holds(ranges: &[(u128, u128)], hash: u64) -> bool {
    ranges
        .iter()
        .any(|&(start, end)| start <= u128::from(hash) && u128::from(hash) < end)
}

/// A time at which a replica's published ranges changed: what it holds from `since` on.
#[derive(Debug, Clone)]
struct Holding {
    since: Timestamp,
    ranges: Vec<(u128, u128)>,
}

/// One write to an object by a replica, as the API server received it.
#[derive(Debug)]
struct Write {
    replica: String,
    object: String,
    received: Timestamp,
}

/// What the audit log shows, with the problems found.
#[derive(Debug, Default)]
pub struct Exclusivity {
    /// Writes to objects, per replica.
    pub writes: BTreeMap<String, usize>,
    /// How many Lease writes published ranges their replica did not hold before.
    pub publications: usize,
    /// How many times an object was written by another replica than the one before.
    pub handovers: usize,
    pub problems: Vec<String>,
}

fn time(event: &Value, field: &str) -> Timestamp {
    let text = event[field].as_str().unwrap_or_default();
    Timestamp::from_str(text).unwrap_or_else(|e| panic!("audit {field} {text:?}: {e}"))
}

/// The identity in a `User-Agent` of the form `name/version (identity)`.
fn agent_identity(agent: &str) -> Option<String> {
    let (_, rest) = agent.rsplit_once('(')?;
    Some(rest.trim_end_matches(')').to_string())
}

/// Reads the audit log at `path` and checks that each object (name → `Memcached` uid) was written by
/// one replica at a time (see the module's documentation).
pub fn exclusivity(path: &Path, uids: &HashMap<String, String>) -> Exclusivity {
    let text = std::fs::read_to_string(path).expect("the audit log");
    let events: Vec<Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .filter(|e: &Value| e["stage"] == "ResponseComplete")
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_i64()
                .is_some_and(|c| c < 300)
        })
        .collect();

    // Each replica's holdings over time, from its Lease writes, plus when its Lease runs out.
    let mut timelines: HashMap<String, Vec<Holding>> = HashMap::new();
    let mut expiry: HashMap<String, Timestamp> = HashMap::new();
    let mut lease_holder: HashMap<String, String> = HashMap::new();
    let mut writes = Vec::new();
    let mut gained = 0;
    for event in &events {
        let resource = event["objectRef"]["resource"].as_str().unwrap_or_default();
        let name = event["objectRef"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let verb = event["verb"].as_str().unwrap_or_default();
        if resource == "leases" {
            let lease = &event["requestObject"];
            if verb == "delete" {
                // Deleted: by its replica on a clean stop, or by another once it had expired.
                if let Some(replica) = lease_holder.get(&name) {
                    let at = time(event, "requestReceivedTimestamp");
                    let timeline = timelines.entry(replica.clone()).or_default();
                    timeline.push(Holding {
                        since: at,
                        ranges: Vec::new(),
                    });
                }
                continue;
            }
            let Some(published) = lease["metadata"]["annotations"][RANGES_ANNOTATION].as_str()
            else {
                continue; // another Lease (leader election, say)
            };
            let replica = lease["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            lease_holder.insert(name, replica.clone());
            let ranges = parse_ranges(published);
            let timeline = timelines.entry(replica.clone()).or_default();
            // A renewal after the Lease had run out does not bridge the gap: the replica held
            // nothing from the expiry on (the others may have taken its part meanwhile), and what it
            // publishes now counts as gained anew.
            let received = time(event, "requestReceivedTimestamp");
            if let Some(&expired) = expiry.get(&replica)
                && expired < received
            {
                timeline.push(Holding {
                    since: expired,
                    ranges: Vec::new(),
                });
            }
            let before = timeline
                .last()
                .map(|h| h.ranges.clone())
                .unwrap_or_default();
            // Conservatively: what it gives up counts until the API server received the write, what
            // it gains from the moment the write was answered.
            timeline.push(Holding {
                since: received,
                ranges: intersect(&before, &ranges),
            });
            if ranges.iter().any(|r| !before.contains(r)) {
                gained += 1;
            }
            timeline.push(Holding {
                since: time(event, "stageTimestamp"),
                ranges,
            });
            let seconds = lease["spec"]["leaseDurationSeconds"].as_i64().unwrap_or(15);
            let renewed = time(event, "stageTimestamp");
            expiry.insert(replica, renewed + SignedDuration::from_secs(seconds));
        } else {
            let agent = event["userAgent"].as_str().unwrap_or_default();
            if let Some(replica) = agent_identity(agent) {
                let received = time(event, "requestReceivedTimestamp");
                writes.push(Write {
                    replica,
                    object: name,
                    received,
                });
            }
        }
    }
    // A replica that stopped renewing holds nothing once its Lease expired.
    for (replica, timeline) in &mut timelines {
        timeline.sort_by_key(|h| h.since);
        if let Some(&expired) = expiry.get(replica)
            && timeline.last().is_some_and(|h| !h.ranges.is_empty())
        {
            timeline.push(Holding {
                since: expired,
                ranges: Vec::new(),
            });
        }
    }

    let mut found = Exclusivity {
        publications: gained,
        ..Exclusivity::default()
    };
    let held_at = |replica: &str, at: Timestamp| -> Vec<(u128, u128)> {
        // The last change at or before `at`.
        let timeline = timelines
            .get(replica)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let current = timeline.iter().rev().find(|h| h.since <= at);
        current.map(|h| h.ranges.clone()).unwrap_or_default()
    };

    // 1. Every write was received while its replica published the object's hash.
    for write in &writes {
        *found.writes.entry(write.replica.clone()).or_default() += 1;
        let Some(uid) = uids.get(&write.object) else {
            found
                .problems
                .push(format!("{}: written, but no such object", write.object));
            continue;
        };
        let held = held_at(&write.replica, write.received);
        if !holds(&held, hash(uid)) {
            found.problems.push(format!(
                "{}: written by {} at {} while it published {held:x?}, not the object's hash {:#018x}",
                write.object,
                write.replica,
                write.received,
                hash(uid)
            ));
        }
    }

    // 2. Writers of one object take turns, each withdrawing the object before the next one writes.
    let mut by_object: BTreeMap<&str, Vec<&Write>> = BTreeMap::new();
    for write in &writes {
        by_object.entry(&write.object).or_default().push(write);
    }
    for (object, mut sequence) in by_object {
        let Some(uid) = uids.get(object) else {
            continue;
        };
        let hash = hash(uid);
        sequence.sort_by_key(|w| w.received);
        for pair in sequence.windows(2) {
            let (first, next) = (pair[0], pair[1]);
            if first.replica == next.replica {
                continue;
            }
            found.handovers += 1;
            let timeline = timelines
                .get(&first.replica)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let withdrawn = timeline.iter().any(|h| {
                first.received < h.since && h.since <= next.received && !holds(&h.ranges, hash)
            });
            if !withdrawn {
                found.problems.push(format!(
                    "{object}: written by {} at {}, then by {} at {} without {} giving it up in between",
                    first.replica, first.received, next.replica, next.received, first.replica
                ));
            }
        }
    }
    found
}

fn intersect(a: &[(u128, u128)], b: &[(u128, u128)]) -> Vec<(u128, u128)> {
    a.iter()
        .flat_map(|&(s1, e1)| {
            b.iter()
                .map(move |&(s2, e2)| (s1.max(s2), e1.min(e2)))
                .filter(|&(start, end)| start < end)
        })
        .collect()
}

/// The operator's flag that turns sharding on.
const SHARDING: &str = "--sharding";
/// What a replica logs when it starts work on ranges, and which filtering it uses.
const WORKING: &str = "started ranges";
const SERVER_SIDE: &str = "server-side shard selector";
const CLIENT_SIDE: &str = "filtering on the client";

/// A drill on a control plane whose kube-apiserver writes the audit log the proof reads; with
/// `server_side`, it also lists and watches by shard (feature gate `ShardedListAndWatch`), else the
/// replicas filter on the client.
struct Audited {
    drill: super::Drill,
    dir: std::path::PathBuf,
    log: std::path::PathBuf,
    server_side: bool,
}

impl Audited {
    async fn start(server_side: bool) -> Audited {
        use super::knobs::add_flags;
        use rustbuilder_envtest::Component;

        let dir = std::env::temp_dir().join(format!("drill-shards-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (policy, log) = (dir.join("audit-policy.yaml"), dir.join("audit.log"));
        std::fs::write(&policy, AUDIT_POLICY).unwrap();
        let mut flags = format!(
            "--audit-policy-file={} --audit-log-path={}",
            policy.display(),
            log.display()
        );
        if server_side {
            flags.push_str(" --feature-gates=ShardedListAndWatch=true");
        }
        add_flags(Component::KubeApiserver, &flags);
        Audited {
            drill: super::Drill::start().await,
            dir,
            log,
            server_side,
        }
    }

    fn launch(&self, name: &str) -> super::Operator {
        super::Operator::launch(self.drill.env.kubeconfig(), name, &[SHARDING])
    }

    /// Three replicas instead of the single operator (no object exists yet), each working on its
    /// ranges, filtering as the API server allows.
    async fn three_replicas(&mut self) -> (super::Operator, super::Operator) {
        use std::time::Duration;
        self.drill.operator = self.launch("replica-a");
        let (b, c) = (self.launch("replica-b"), self.launch("replica-c"));
        let mode = if self.server_side {
            SERVER_SIDE
        } else {
            CLIENT_SIDE
        };
        for replica in [&self.drill.operator, &b, &c] {
            replica.wait_for_log(WORKING, Duration::from_secs(60)).await;
            replica.wait_for_log(mode, Duration::from_secs(10)).await;
        }
        (b, c)
    }

    /// The audit log's proof (see the module's documentation), asserted, with what it counted.
    async fn prove(&self) -> Exclusivity {
        use kube::ResourceExt;
        use kube::api::Api;
        use project::api::v1alpha1::Memcached;

        let memcacheds: Api<Memcached> = Api::namespaced(self.drill.client(), super::NAMESPACE);
        let uids = memcacheds.list(&Default::default()).await.unwrap().items;
        let uids = uids
            .iter()
            .map(|m| (m.name_any(), m.uid().unwrap_or_default()))
            .collect();
        let found = exclusivity(&self.log, &uids);
        assert!(
            found.problems.is_empty(),
            "{} writes by a replica that did not hold the object alone, e.g. {:#?}",
            found.problems.len(),
            &found.problems[..found.problems.len().min(10)]
        );
        found
    }

    /// Removes the audit log, once the drill has passed (a failed one leaves it to read).
    fn passed(self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }

    fn mode(&self) -> &'static str {
        if self.server_side {
            "server-side"
        } else {
            "client-side"
        }
    }
}

/// The sharding drill: three replicas share a wave; one is SIGKILLed mid-wave, its ranges are taken
/// over; a fourth joins and the ranges are rebalanced; the wave converges to the same end state as
/// with one replica, and the audit log proves no object was written by two replicas at once.
/// `server_side`: kube-apiserver runs with the `ShardedListAndWatch` feature gate (each replica
/// lists and watches its own range), else the replicas filter on the client.
pub async fn drill(objects: usize, server_side: bool) {
    use std::time::{Duration, Instant};

    let mut audited = Audited::start(server_side).await;
    let (mut b, mut c) = audited.three_replicas().await;
    let drill = &mut audited.drill;
    drill.create_wave(objects).await;
    drill.wait_for_deployments(objects / 3).await;
    let at_fault = drill.progress(objects).await;
    let killed = Instant::now();
    c.kill();
    // The two left take c's ranges once its Lease has expired; then a fourth joins.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let d = audited.launch("replica-d");
    d.wait_for_log(WORKING, Duration::from_secs(60)).await;
    let joined = killed.elapsed();
    // More objects once the fourth works, so that it has some of its own even when the wave is done
    // by then (each misses its third with a chance of 2 in 3; all of 30, once in 190,000 runs).
    let more = (objects / 10).max(30);
    let drill = &mut audited.drill;
    drill.create_objects(objects..objects + more).await;
    let objects = objects + more;
    let recovery = drill.wait_converged(objects).await;
    let total = killed.elapsed();
    for (name, replica) in [("a", &mut drill.operator), ("b", &mut b)] {
        assert!(replica.exited().is_none(), "replica {name} exited");
    }

    let found = audited.prove().await;
    // Every replica did part of the work, none all of it: shared, not duplicated.
    assert_eq!(found.writes.len(), 4, "writers: {:?}", found.writes);
    eprintln!(
        "drill sharded ({}): {objects} objects; at the kill {} Deployments, {} converged; the fourth \
         replica joined {joined:.1?} after the kill; converged {total:.1?} after the kill ({recovery:.1?} \
         after the join); writes per replica {:?}; {} publications of new ranges; {} objects handed \
         over between writes",
        audited.mode(),
        at_fault.0,
        at_fault.1,
        found.writes.values().collect::<Vec<_>>(),
        found.publications,
        found.handovers,
    );
    audited.passed();
}

/// The stalled-member drill: three replicas share a wave; one is SIGSTOPped mid-wave for longer
/// than its Lease, so the other two take its ranges over, then SIGCONTinued. It wakes up past its
/// fence with reconciles in flight and a queue of admitted objects: it must write nothing more
/// until it has renewed its Lease and claimed a part anew (it rejoins; it does not exit). The wave
/// converges, and the audit log proves that no object was written by a replica that did not hold
/// it alone.
pub async fn stalled(objects: usize) {
    use std::time::{Duration, Instant};

    let mut audited = Audited::start(true).await;
    let (mut b, mut c) = audited.three_replicas().await;
    let drill = &mut audited.drill;
    // While the wave is still being created, so that c has reconciles in flight and objects queued
    // when it stops.
    let (at_fault, ()) = tokio::join!(
        async {
            drill.wait_for_deployments(objects / 10).await;
            c.pause();
            drill.progress(objects).await
        },
        drill.create_wave(objects)
    );
    let paused = Instant::now();
    // The Lease lasts 15 s from the others' last sight of a renewal: they take c's ranges after that
    // (and converge c's objects meanwhile, if the wave allows).
    tokio::time::sleep(Duration::from_secs(25)).await;
    c.resume();
    let resumed = Instant::now();
    // It wakes past its fence: it drops its part, writes nothing (the audit log's proof below), and
    // rejoins once it has renewed its Lease, claiming a part anew: it does not exit.
    let rejoined = async {
        loop {
            let log = c.log_text();
            let lost = [
                "the last shard lease renewal is older than",
                "could not renew the shard lease",
            ];
            let (_, after) = log.split_once(" rejoining").unwrap_or_default();
            if lost.iter().any(|l| log.contains(l)) && after.contains("started ranges") {
                break resumed.elapsed();
            }
            assert!(
                resumed.elapsed() < Duration::from_secs(60),
                "the stalled replica did not work again within 60 s of its resume; {}",
                c.tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let rejoined = rejoined.await;
    let recovery = drill.wait_converged(objects).await;
    for (name, replica) in [("a", &mut drill.operator), ("b", &mut b), ("c", &mut c)] {
        assert!(replica.exited().is_none(), "replica {name} exited");
    }

    let found = audited.prove().await;
    // The stalled replica wrote before its pause: the proof covers all three.
    assert_eq!(found.writes.len(), 3, "writers: {:?}", found.writes);
    eprintln!(
        "drill shard_member_stalled ({}): {objects} objects; at the pause {} Deployments (the wave \
         still being created); paused {:.1?}; the stalled replica worked again {rejoined:.1?} after it was resumed; \
         converged {:.1?} after the pause ({recovery:.1?} after the resume); writes per replica {:?}; \
         {} objects handed over between writes",
        audited.mode(),
        at_fault.0,
        resumed - paused,
        paused.elapsed(),
        found.writes.values().collect::<Vec<_>>(),
        found.handovers,
    );
    audited.passed();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_as_go_does() {
        // Go: fnv.New64a() over "abc".
        assert_eq!(hash("abc"), 0xe71f_a219_0541_574b);
        assert_eq!(hash(""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn overlaps_and_holdings() {
        let ranges = parse_ranges("0x0000000000000000-0x8000000000000000");
        assert!(holds(&ranges, 0x7fff_ffff_ffff_ffff));
        assert!(!holds(&ranges, 0x8000_0000_0000_0000));
        let upper = parse_ranges("0x8000000000000000-0x10000000000000000");
        assert!(holds(&upper, u64::MAX));
        assert_eq!(intersect(&ranges, &upper), []);
    }

    /// An audit event as kube-apiserver logs it, at `second` seconds past a fixed time.
    fn event(second: u32, resource: &str, body: serde_json::Value) -> String {
        let at = format!("2026-01-01T00:00:{second:02}.000000Z");
        let mut event = serde_json::json!({
            "stage": "ResponseComplete",
            "responseStatus": { "code": 200 },
            "requestReceivedTimestamp": at,
            "stageTimestamp": at,
            "objectRef": { "resource": resource },
        });
        let fields = body.as_object().unwrap().clone();
        event.as_object_mut().unwrap().extend(fields);
        event.to_string()
    }

    fn renewal(second: u32, replica: &str) -> String {
        let lease = serde_json::json!({
            "metadata": { "annotations": { (RANGES_ANNOTATION): "0x0000000000000000-0x10000000000000000" } },
            "spec": { "holderIdentity": replica, "leaseDurationSeconds": 15 },
        });
        let body = serde_json::json!({ "verb": "update", "objectRef": { "resource": "leases", "name": replica }, "requestObject": lease });
        event(second, "leases", body)
    }

    fn write(second: u32, replica: &str) -> String {
        let body = serde_json::json!({
            "verb": "patch",
            "objectRef": { "resource": "deployments", "name": "x" },
            "userAgent": format!("operator/0.1 ({replica})"),
        });
        event(second, "deployments", body)
    }

    #[test]
    fn a_lease_that_ran_out_hands_over_even_when_renewed_later() {
        // a works on x, is paused past its Lease (expired at 16 s), b takes over and writes at 21 s;
        // a wakes, renews at 30 s and writes again at 31 s while b still holds x.
        let log = [
            renewal(1, "a"),
            write(2, "a"),
            renewal(20, "b"),
            write(21, "b"),
            renewal(30, "a"),
            write(31, "a"),
        ];
        let path = std::env::temp_dir().join(format!("audit-lapse-{}.log", std::process::id()));
        std::fs::write(&path, log.join("\n")).unwrap();
        let uids = HashMap::from([("x".to_string(), "uid-of-x".to_string())]);
        let found = exclusivity(&path, &uids);
        std::fs::remove_file(&path).unwrap();
        // b's write at 21 s is a handover (a's Lease had run out); a's at 31 s is a second writer.
        assert_eq!(found.handovers, 2, "{found:?}");
        assert_eq!(found.problems.len(), 1, "{:#?}", found.problems);
        assert!(
            found.problems[0].contains("then by a at")
                && found.problems[0].contains("without b giving it up"),
            "{}",
            found.problems[0]
        );
    }
}
