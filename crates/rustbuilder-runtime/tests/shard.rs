//! Sharding on a real API server: the server's shard selector against our own hash, with the
//! `ShardedListAndWatch` feature gate on and off; sharded caches of two members; and three members
//! that hand ranges over as one is killed and another joins, never two working on one hash at once.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::client::Body;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use rustbuilder_envtest::TestEnv;
use rustbuilder_runtime::Manager;
use rustbuilder_runtime::apply;
use rustbuilder_runtime::cache::Cache;
use rustbuilder_runtime::manager::leader::Timing;
use rustbuilder_runtime::shard::{
    self, BUCKET_LABEL, Filtering, GROUP_LABEL, Membership, Range, Ranges, Shard, ShardKey,
    Transition,
};
use support::eventually;

const LABEL: &str = "test.example.com/shard";

/// Short enough for a test, in whole seconds as Leases count them.
const TIMING: Timing = Timing {
    lease_duration: Duration::from_secs(3),
    renew_deadline: Duration::from_secs(2),
    retry_period: Duration::from_millis(500),
};

async fn create_configmaps(api: &Api<ConfigMap>, prefix: &str, count: usize) {
    for i in 0..count {
        let configmap = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("{prefix}-{i}")),
                labels: Some([(LABEL.to_string(), "yes".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &configmap)
            .await
            .unwrap();
    }
}

/// The names of `configmaps` whose uid hashes into `ranges`.
fn names_in(configmaps: &[ConfigMap], ranges: &Ranges) -> BTreeSet<String> {
    let inside = |c: &&ConfigMap| ranges.contains(shard::hash(&c.uid().unwrap()));
    configmaps
        .iter()
        .filter(inside)
        .map(|c| c.name_any())
        .collect()
}

/// A ConfigMap `name` in `default` controlled by `owner`, labelled `LABEL=<label>`.
fn child_of(owner: &ConfigMap, name: &str, label: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("default".into()),
            labels: Some([(LABEL.to_string(), label.to_string())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: owner.name_any(),
                uid: owner.uid().unwrap(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn names(cache: &Cache<ConfigMap>) -> BTreeSet<String> {
    cache.list().iter().map(|c| c.name_any()).collect()
}

/// A client that records the URI of every request it sends through `client`.
#[derive(Clone)]
struct Recording {
    client: Client,
    uris: Arc<Mutex<Vec<String>>>,
}

impl tower::Service<hyper::Request<Body>> for Recording {
    type Response = hyper::Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: hyper::Request<Body>) -> Self::Future {
        self.uris.lock().unwrap().push(request.uri().to_string());
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await })
    }
}

/// Lists with selectors, then two members with a sharded cache each: they split the objects
/// between them, a new object lands in exactly one, and the one left after the other stops holds
/// them all. `filtering` is what the API server is expected to do.
async fn split_between_two_members(env: &TestEnv, filtering: Filtering) {
    let client = env.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    create_configmaps(&api, "before", 24).await;
    let labelled = ListParams::default().labels(&format!("{LABEL}=yes"));
    let all = api.list(&labelled).await.unwrap().items;
    let everything: BTreeSet<String> = all.iter().map(|c| c.name_any()).collect();
    assert_eq!(everything.len(), 24);
    // A child of each, which follows its owner from shard to shard.
    for owner in &all {
        let child = child_of(owner, &format!("child-of-{}", owner.name_any()), "child");
        api.create(&PostParams::default(), &child).await.unwrap();
    }
    // The names `<prefix><owner>` of the owners in `ranges`.
    let named_after = |prefix: &str, ranges: &Ranges| -> BTreeSet<String> {
        let owners = names_in(&all, ranges);
        owners
            .iter()
            .map(|owner| format!("{prefix}{owner}"))
            .collect()
    };
    let children_in = |ranges: &Ranges| named_after("child-of-", ranges);
    // The children a member applies: labelled with their owner's bucket (below).
    let applied_in = |ranges: &Ranges| named_after("applied-", ranges);

    assert_eq!(shard::detect(&api).await.unwrap(), filtering);
    for ranges in [
        Ranges::from(Range::part(1, 3)),
        Ranges::new([Range::part(0, 4), Range::part(2, 4)]),
        // A member's part as the group assigns it: dozens of ranges in one selector.
        Ranges::assigned(&["a", "b", "c"], "a"),
    ] {
        let selector = ranges.selector().unwrap();
        let selecting = shard::selecting_client(&client, &selector);
        let listed = Api::<ConfigMap>::namespaced(selecting, "default");
        let listed = listed.list(&labelled).await.unwrap().items;
        let listed: BTreeSet<String> = listed.iter().map(|c| c.name_any()).collect();
        let expected = match filtering {
            Filtering::Server => names_in(&all, &ranges),
            Filtering::Client => everything.clone(),
        };
        assert_eq!(listed, expected, "{selector}");
        let some = names_in(&all, &ranges).len();
        assert!(some > 0 && some < 24, "24 uids, none or all in {ranges}?");
    }

    // A watch with a selector: with the gate, only the events of the range arrive.
    let half = Ranges::from(Range::part(0, 2));
    let selecting = shard::selecting_client(&client, &half.selector().unwrap());
    let watched = Api::<ConfigMap>::namespaced(selecting, "default");
    let version = api.list(&labelled).await.unwrap().metadata.resource_version;
    let params = WatchParams::default().labels(&format!("{LABEL}=watched"));
    let events = watched.watch(&params, &version.unwrap()).await.unwrap();
    let mut events = std::pin::pin!(events);
    let mut created = Vec::new();
    for i in 0..8 {
        let configmap = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("watched-{i}")),
                labels: Some([(LABEL.to_string(), "watched".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        created.push(
            api.create(&PostParams::default(), &configmap)
                .await
                .unwrap(),
        );
    }
    let expected = match filtering {
        Filtering::Server => names_in(&created, &half),
        Filtering::Client => created.iter().map(|c| c.name_any()).collect(),
    };
    let mut seen = BTreeSet::new();
    // Until one more event than expected could have come (or none does for a second).
    while seen.len() <= expected.len() {
        let next = tokio::time::timeout(Duration::from_secs(1), events.next()).await;
        let Ok(Some(event)) = next else { break };
        if let WatchEvent::Added(configmap) = event.unwrap() {
            seen.insert(configmap.name_any());
        }
    }
    assert_eq!(seen, expected, "events of a watch with {half}");
    let watched_list = ListParams::default().labels(&format!("{LABEL}=watched"));
    api.delete_collection(&Default::default(), &watched_list)
        .await
        .unwrap();

    // Each member in a manager of its own, as in its own process.
    let uris = Arc::new(Mutex::new(Vec::new()));
    let recording = Recording {
        client: client.clone(),
        uris: uris.clone(),
    };
    let recording = Client::new(recording, "default");
    let members: Vec<Replica> = ["one", "two"]
        .into_iter()
        .map(|identity| {
            let manager = Manager::new("shard-test", recording.clone());
            let shard = Membership::new(manager.client(), "default", "split")
                .identity(identity)
                .timing(TIMING)
                .expect("valid timing")
                .metrics(manager.metrics())
                .start();
            let config = watcher::Config::default().labels(&format!("{LABEL}=yes"));
            let api = Api::namespaced(manager.client(), "default");
            let cache = Cache::sharded(&manager, api.clone(), config, &shard, ShardKey::Uid);
            let config = watcher::Config::default().labels(&format!("{LABEL}=child"));
            let key = ShardKey::ControllerOwner;
            let children = Cache::sharded(&manager, api.clone(), config, &shard, key);
            // Both kinds of children, selected by their bucket label.
            let config = watcher::Config::default().labels(&format!("{LABEL} in (child,applied)"));
            let key = ShardKey::OwnerBucket;
            let bucketed = Cache::sharded(&manager, api, config, &shard, key);
            Replica {
                manager,
                shard,
                cache,
                children,
                bucketed,
            }
        })
        .collect();
    // A second child of each owner, applied by this process, now a shard member: it carries the
    // owner's bucket, and the first child does not.
    for owner in &all {
        let child = child_of(owner, &format!("applied-{}", owner.name_any()), "applied");
        let applied = apply::apply(&api, None, &child, "shard-test")
            .await
            .unwrap();
        let bucket = shard::bucket(shard::hash(&owner.uid().unwrap()));
        assert_eq!(applied.object().labels()[BUCKET_LABEL], bucket);
    }

    // Each cache holds exactly the objects of its member's range, and the two ranges split the
    // space as the group assigns it (about in halves).
    let split = eventually(Duration::from_secs(10), async || {
        members.iter().all(|member| {
            let held = member.shard.state().borrow().held.clone();
            held == Ranges::assigned(&["one", "two"], member.shard.identity())
                && member.cache.is_synced()
                && names(&member.cache) == names_in(&all, &held)
                && names(&member.children) == children_in(&held)
                // Only the labelled children: the API server selected by the label, not the
                // cache (which would keep the unlabelled children of the member's owners too).
                && names(&member.bucketed) == applied_in(&held)
        })
    })
    .await;
    let held: Vec<Ranges> = members
        .iter()
        .map(|member| member.shard.state().borrow().held.clone())
        .collect();
    assert!(split, "not split as assigned: {held:?}");
    assert!(held[0].union(&held[1]).is_full(), "{held:?}");
    for (member, held) in members.iter().zip(&held) {
        let metrics = member.manager.metrics().encode();
        let share = metrics
            .lines()
            .find_map(|line| line.strip_prefix(r#"shard_active_share{group="split"} "#))
            .and_then(|value| value.parse::<f64>().ok());
        assert_eq!(share, Some(held.share()), "{metrics}");
        assert!((0.3..0.7).contains(&held.share()), "{held}: far from half");
        let objects = member.cache.len();
        for expected in [
            r#"shard_members{group="split"} 2"#.to_string(),
            format!(r#"shard_objects{{group="split",kind="ConfigMap",key="uid"}} {objects}"#),
            format!(
                r#"shard_objects{{group="split",kind="ConfigMap",key="controller_owner"}} {objects}"#
            ),
            r#"shard_handovers_total{group="split",direction="acquired"}"#.to_string(),
        ] {
            assert!(metrics.contains(&expected), "no {expected} in\n{metrics}");
        }
    }
    let uris = uris.lock().unwrap().clone();
    let watches = uris.iter().filter(|u| u.contains("watch=true"));
    let selected: Vec<&String> = watches.filter(|u| u.contains("shardSelector=")).collect();
    assert_eq!(
        !selected.is_empty(),
        filtering == Filtering::Server,
        "watches with a shardSelector: {selected:?}"
    );
    let by_bucket = uris.iter().filter(|u| u.contains("watch=true"));
    let by_bucket: Vec<&String> = by_bucket.filter(|u| u.contains("shard-bucket")).collect();
    assert!(
        !by_bucket.is_empty(),
        "no watch selects by the bucket label: {uris:?}"
    );

    // A new object reaches one cache only, by the watch.
    create_configmaps(&api, "after", 1).await;
    let created = api.get("after-0").await.unwrap();
    let hash = shard::hash(&created.uid().unwrap());
    let seen_once = eventually(Duration::from_secs(5), async || {
        let holding: Vec<bool> = members
            .iter()
            .map(|member| member.cache.get(Some("default"), "after-0").is_some())
            .collect();
        holding.iter().filter(|h| **h).count() == 1
    })
    .await;
    assert!(seen_once, "the new object is not in exactly one cache");
    let owner = members
        .iter()
        .find(|member| member.cache.get(Some("default"), "after-0").is_some())
        .unwrap();
    assert!(owner.shard.state().borrow().held.contains(hash));

    // One leaves cleanly: the other takes over at once and its cache lists everything.
    members[0].shard.stop().await;
    let Replica {
        shard: staying,
        cache,
        children,
        bucketed,
        ..
    } = &members[1];
    let mut everything = everything;
    everything.insert("after-0".into());
    let took_over = eventually(Duration::from_secs(5), async || {
        let held = staying.state().borrow().held.clone();
        // Holding the whole space, the member selects no bucket: every child, labelled or not.
        let every_child = children_in(&held)
            .union(&applied_in(&held))
            .cloned()
            .collect();
        held.is_full()
            && names(cache) == everything
            && names(children) == children_in(&held)
            && names(bucketed) == every_child
    })
    .await;
    assert!(
        took_over,
        "not taken over within 5 s (before the Lease would expire): {:?}",
        staying.state().borrow()
    );
    staying.stop().await;
    for member in &members {
        member.manager.shutdown();
    }
}

/// A member of the group `split` with its caches.
struct Replica {
    manager: Manager,
    shard: Shard,
    cache: Cache<ConfigMap>,
    children: Cache<ConfigMap>,
    bucketed: Cache<ConfigMap>,
}

#[tokio::test]
async fn with_the_feature_gate_the_api_server_sends_each_member_its_own_objects() {
    let env = TestEnv::builder()
        .feature_gates("ShardedListAndWatch=true")
        .start()
        .await;
    split_between_two_members(&env, Filtering::Server).await;
}

#[tokio::test]
async fn without_it_each_member_filters_on_the_client() {
    let env = TestEnv::start().await;
    split_between_two_members(&env, Filtering::Client).await;
}

/// A change of what one member holds, as its transition hook (or the test, for a killed member)
/// reported it.
#[derive(Clone, Debug)]
struct Held {
    member: String,
    held: Ranges,
    at: Instant,
}

impl From<&Transition> for Held {
    fn from(transition: &Transition) -> Self {
        Held {
            member: transition.identity.clone(),
            held: transition.held.clone(),
            at: transition.at,
        }
    }
}

/// What the members held, and the work they did: (member, uid, start, end) of every permit.
#[derive(Default)]
struct Record {
    held: Vec<Held>,
    work: Vec<(String, String, Instant, Instant)>,
}

/// From when, until when (`None`: the end), a member held what.
type Span<'a> = (Instant, Option<Instant>, &'a Ranges);

/// Finds an instant at which two members held overlapping ranges, or worked on one uid. Work must
/// also lie within what its member held.
fn find_overlap(record: &Record) -> Option<String> {
    let mut changes: Vec<&Held> = record.held.iter().collect();
    changes.sort_by_key(|change| change.at);
    let mut now: HashMap<&str, &Ranges> = HashMap::new();
    let mut spans: HashMap<&str, Vec<Span>> = HashMap::new();
    for change in changes {
        let member = change.member.as_str();
        for (other, ranges) in &now {
            if *other != member && ranges.overlaps(&change.held) {
                return Some(format!(
                    "{member} took {} at {:?} while {other} held {ranges}",
                    change.held, change.at
                ));
            }
        }
        now.insert(member, &change.held);
        let member_spans = spans.entry(member).or_default();
        if let Some(last) = member_spans.last_mut() {
            last.1 = Some(change.at);
        }
        member_spans.push((change.at, None, &change.held));
    }
    for (i, (member, uid, start, end)) in record.work.iter().enumerate() {
        let hash = shard::hash(uid);
        // Every span during the work held its hash, from one that began before it.
        let member_spans = spans.get(member.as_str()).into_iter().flatten();
        let mut during = member_spans
            .filter(|(from, until, _)| from < end && until.is_none_or(|until| until > *start))
            .peekable();
        let began = during.peek().is_some_and(|(from, _, _)| from <= start);
        let covered = began && during.all(|(_, _, held)| held.contains(hash));
        if !covered {
            return Some(format!("{member} worked on {uid} outside what it held"));
        }
        for (other, other_uid, other_start, other_end) in &record.work[i + 1..] {
            if other != member && other_uid == uid && start < other_end && other_start < end {
                return Some(format!("{member} and {other} worked on {uid} at once"));
            }
        }
    }
    None
}

#[test]
fn the_overlap_check_finds_overlaps() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let held = |member: &str, held: &Ranges, ms| Held {
        member: member.into(),
        held: held.clone(),
        at: at(ms),
    };
    let first = Ranges::from(Range::part(0, 2));
    let second = Ranges::from(Range::part(1, 2));
    let clean = Record {
        held: vec![
            held("a", &Ranges::full(), 0),
            held("a", &first, 10),
            held("b", &second, 20),
        ],
        work: Vec::new(),
    };
    assert_eq!(find_overlap(&clean), None);

    // `b` starts on the second half before `a` has given it up.
    let mut early = clean;
    early.held[2].at = at(5);
    let found = find_overlap(&early).unwrap();
    assert!(found.starts_with("b took"), "{found}");

    // Work outside what the member held.
    let uid = (0..)
        .map(|i| format!("uid-{i}"))
        .find(|uid| second.contains(shard::hash(uid)))
        .unwrap();
    let work = |member: &str, from, to| (member.to_string(), uid.clone(), at(from), at(to));
    let outside = Record {
        held: vec![held("a", &first, 0), held("b", &second, 0)],
        work: vec![work("b", 1, 2), work("a", 3, 4)],
    };
    let found = find_overlap(&outside).unwrap();
    assert!(
        found.contains("a worked") && found.contains("outside"),
        "{found}"
    );

    // Work that outlives the range, and two members on one uid at once.
    let late = Record {
        held: vec![
            held("a", &second, 0),
            held("a", &Ranges::none(), 10),
            held("b", &second, 20),
        ],
        work: vec![work("a", 1, 15)],
    };
    assert!(find_overlap(&late).unwrap().contains("outside"));
    // Work across a change that keeps its hash is fine.
    let across = Record {
        held: vec![held("a", &second, 0), held("a", &Ranges::full(), 5)],
        work: vec![work("a", 1, 8)],
    };
    assert_eq!(find_overlap(&across), None);
    let both = Record {
        held: vec![held("a", &second, 0), held("b", &first, 0)],
        work: vec![work("a", 1, 5), work("a", 6, 9)],
    };
    assert_eq!(find_overlap(&both), None);
    let mut both = both;
    both.held[1].held = second.clone();
    both.work[1].0 = "b".into();
    assert!(find_overlap(&both).unwrap().contains("took"));
}

/// Work admitted on `uid`; recorded when it ends (also when its task is aborted).
struct Work {
    record: Arc<Mutex<Record>>,
    member: String,
    uid: String,
    start: Instant,
    _permit: shard::Permit,
}

impl Drop for Work {
    fn drop(&mut self) {
        // Before the permit goes, which happens after this.
        let end = Instant::now();
        let work = (self.member.clone(), self.uid.clone(), self.start, end);
        self.record.lock().unwrap().work.push(work);
    }
}

/// A member of the group `drill` with two workers that keep taking permits on a few uids.
struct Member {
    shard: Shard,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

fn join(client: &Client, identity: &str, record: &Arc<Mutex<Record>>) -> Member {
    join_timed(client, identity, record, TIMING)
}

fn join_timed(
    client: &Client,
    identity: &str,
    record: &Arc<Mutex<Record>>,
    timing: Timing,
) -> Member {
    let hook_record = record.clone();
    let shard = Membership::new(client.clone(), "default", "drill")
        .identity(identity)
        .timing(timing)
        .expect("valid timing")
        .on_transition(move |t| hook_record.lock().unwrap().held.push(t.into()))
        .start();
    let workers = (0..2)
        .map(|worker| {
            let (shard, record) = (shard.clone(), record.clone());
            let member = identity.to_string();
            tokio::spawn(async move {
                for round in 0usize.. {
                    let uid = uid((round * 7 + worker * 3) % 24);
                    let Some(permit) = shard.enter(&uid) else {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    };
                    let _work = Work {
                        record: record.clone(),
                        member: member.clone(),
                        uid,
                        start: Instant::now(),
                        _permit: permit,
                    };
                    // Work ends when the member's fence passes, as a controller's reconciles do.
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(40)) => {}
                        () = shard.fence().passed() => {}
                    }
                }
            })
        })
        .collect();
    Member { shard, workers }
}

/// A made-up uid. Uids that differ in their last character only (`uid-1`, `uid-2`) have FNV-1a
/// hashes close together; the API server's random ones do not.
fn uid(i: usize) -> String {
    let bits = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!("{:08x}-{:04x}-{:012x}", bits >> 32, bits & 0xffff, bits)
}

/// Whether `members` have settled: all see `members.len()` members, and their ranges split the
/// space without overlap.
fn settled(members: &[&Member]) -> bool {
    let states: Vec<_> = members
        .iter()
        .map(|m| m.shard.state().borrow().clone())
        .collect();
    let all = states
        .iter()
        .fold(Ranges::none(), |all, s| all.union(&s.held));
    let share: f64 = states.iter().map(|s| s.held.share()).sum();
    states
        .iter()
        .all(|s| s.members == members.len() && s.active == s.held)
        && all.is_full()
        && (share - 1.0).abs() < 1e-9
}

#[tokio::test]
async fn members_hand_ranges_over_without_overlap() {
    let part = |members: &[&str], member: &str| Ranges::assigned(members, member);
    for member in ["a", "b", "c"] {
        let part = part(&["a", "b", "c"], member);
        let in_part = (0..24).filter(|i| part.contains(shard::hash(&uid(*i))));
        assert!(in_part.count() >= 3, "too few test uids in {member}'s part");
    }
    let env = TestEnv::start().await;
    let client = env.client();
    let record = Arc::new(Mutex::new(Record::default()));
    let a = join(&client, "a", &record);
    let b = join(&client, "b", &record);
    let c = join(&client, "c", &record);
    let started = Instant::now();
    assert!(
        eventually(Duration::from_secs(10), async || settled(&[&a, &b, &c])).await,
        "three members did not split the space"
    );
    for (member, index, name) in [(&a, 0, "a"), (&b, 1, "b"), (&c, 2, "c")] {
        let state = member.shard.state().borrow().clone();
        assert_eq!(state.index, Some(index));
        assert_eq!(state.held, part(&["a", "b", "c"], name));
    }
    eprintln!("3 members settled in {:?}", started.elapsed());
    let worked = |member: &str| record.lock().unwrap().work.iter().any(|w| w.0 == member);
    let all_worked = eventually(Duration::from_secs(5), async || {
        ["a", "b", "c"].into_iter().all(worked)
    });
    assert!(all_worked.await, "not every member got work");

    // `b` dies without a word: its Lease stays until it expires.
    for worker in &b.workers {
        worker.abort();
    }
    // Aborted tasks drop their work (recording it) before the handle reports them done.
    for worker in &b.workers {
        while !worker.is_finished() {
            tokio::task::yield_now().await;
        }
    }
    b.shard.abort();
    let killed = Instant::now();
    let gone = Held {
        member: "b".into(),
        held: Ranges::none(),
        at: killed,
    };
    record.lock().unwrap().held.push(gone);
    assert!(
        eventually(Duration::from_secs(10), async || settled(&[&a, &c])).await,
        "the two left did not take over"
    );
    let took = killed.elapsed();
    eprintln!("b's range taken over {took:?} after it died");
    // b last renewed up to a retry period (and a request) before it died.
    let earliest = TIMING.lease_duration - TIMING.retry_period - Duration::from_millis(200);
    assert!(
        took >= earliest,
        "taken over in {took:?}, before b's Lease expired"
    );

    let d = join(&client, "d", &record);
    let joined = Instant::now();
    assert!(
        eventually(Duration::from_secs(10), async || settled(&[&a, &c, &d])).await,
        "not rebalanced after d joined"
    );
    eprintln!("rebalanced {:?} after d joined", joined.elapsed());
    assert_eq!(d.shard.state().borrow().held, part(&["a", "c", "d"], "d"));
    // Settled is not yet worked: d's workers take their first permit after it.
    assert!(
        eventually(Duration::from_secs(5), async || worked("d")).await,
        "d got no work after the rebalance"
    );

    for member in [&a, &c, &d] {
        for worker in &member.workers {
            worker.abort();
        }
    }
    for member in [&a, &c, &d] {
        member.shard.stop().await;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let left = leases
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}=drill")))
        .await
        .unwrap();
    let left: Vec<String> = left.iter().map(|l| l.name_any()).collect();
    assert!(left.is_empty(), "Leases left behind: {left:?}");

    // A member whose Lease is taken away (as another member does once it judges it expired) drops
    // everything, then rejoins with a new Lease and, alone, takes everything again.
    let e = Membership::new(client.clone(), "default", "alone")
        .identity("e")
        .timing(TIMING)
        .expect("valid timing")
        .start();
    let full = eventually(Duration::from_secs(5), async || {
        e.state().borrow().held.is_full()
    });
    assert!(full.await, "a lone member did not take everything");
    assert!(e.enter(&uid(0)).is_some());
    leases
        .delete("alone-shard-e", &Default::default())
        .await
        .unwrap();
    let lost = tokio::time::timeout(TIMING.renew_deadline, e.lost()).await;
    assert!(
        lost.is_ok(),
        "still working without a Lease: {:?}",
        e.state().borrow()
    );
    assert!(e.enter(&uid(0)).is_none() && e.state().borrow().held.is_empty());
    let rejoined = eventually(Duration::from_secs(5), async || {
        let state = e.state().borrow().clone();
        !state.lost && state.held.is_full()
    });
    assert!(rejoined.await, "did not rejoin: {:?}", e.state().borrow());
    assert!(e.enter(&uid(0)).is_some());
    assert!(leases.get_opt("alone-shard-e").await.unwrap().is_some());
    e.stop().await;

    let record = record.lock().unwrap();
    let members: BTreeSet<&str> = record.work.iter().map(|w| w.0.as_str()).collect();
    assert_eq!(
        members,
        BTreeSet::from(["a", "b", "c", "d"]),
        "every member worked"
    );
    assert!(record.held.len() >= 8, "{:?}", record.held);
    if let Some(overlap) = find_overlap(&record) {
        panic!("{overlap}\n{:#?}", record.held);
    }
}

/// A client to the API server whose Lease requests can be made slow: once armed, the next Lease
/// write reaches the server at once but its answer comes `delay` later, and every Lease request
/// after it hangs (the API server, or the way to it, stalls for this member only).
#[derive(Clone)]
struct StallingLeases {
    client: Client,
    delay: Duration,
    armed: Arc<std::sync::atomic::AtomicBool>,
    /// When the delayed write was sent.
    sent: Arc<Mutex<Option<Instant>>>,
}

impl tower::Service<hyper::Request<Body>> for StallingLeases {
    type Response = hyper::Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: hyper::Request<Body>) -> Self::Future {
        let client = self.client.clone();
        let lease = request.uri().path().contains("/leases");
        if !lease || !self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(async move { client.send(request).await });
        }
        let mut sent = self.sent.lock().unwrap();
        if sent.is_some() || request.method() != hyper::Method::PUT {
            return Box::pin(std::future::pending());
        }
        *sent = Some(Instant::now());
        let delay = self.delay;
        Box::pin(async move {
            let answer = client.send(request).await;
            tokio::time::sleep(delay).await;
            answer
        })
    }
}

/// The others take a member's ranges once its Lease has gone unrenewed for the lease duration
/// since they saw the last renewal arrive; so the member must count its renew deadline from when it
/// sent that renewal. Here the answer to a renewal comes late (after more than lease duration −
/// renew deadline) and nothing gets through after it: counted from the answer, the member would
/// still be admitting work when the other member takes its range.
#[tokio::test]
async fn a_member_whose_renewal_is_answered_late_stops_before_the_others_take_over() {
    // lease − renew deadline (0.5 s) < delay (2 s) < renew deadline − retry period (2.25 s): the
    // answer arrives before the renewal times out.
    const TIMED: Timing = Timing {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_millis(2500),
        retry_period: Duration::from_millis(250),
    };
    let env = TestEnv::start().await;
    let client = env.client();
    let stalling = StallingLeases {
        client: client.clone(),
        delay: Duration::from_secs(2),
        armed: Arc::default(),
        sent: Arc::default(),
    };
    let stalled = Client::new(stalling.clone(), "default");
    let record = Arc::new(Mutex::new(Record::default()));
    let a = join_timed(&stalled, "a", &record, TIMED);
    let b = join_timed(&client, "b", &record, TIMED);
    assert!(
        eventually(Duration::from_secs(10), async || settled(&[&a, &b])).await,
        "two members did not split the space"
    );
    let worked = |member: &str| record.lock().unwrap().work.iter().any(|w| w.0 == member);
    assert!(
        eventually(Duration::from_secs(5), async || worked("a") && worked("b")).await,
        "not both members got work"
    );

    stalling
        .armed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let lost = tokio::time::timeout(Duration::from_secs(10), a.shard.lost()).await;
    assert!(
        lost.is_ok(),
        "a kept working with its Lease requests hanging"
    );
    let sent = stalling
        .sent
        .lock()
        .unwrap()
        .expect("a renewal was delayed");
    let stopped = sent.elapsed();
    assert!(
        eventually(Duration::from_secs(10), async || {
            b.shard.state().borrow().held.is_full()
        })
        .await,
        "b did not take a's range over"
    );
    for member in [&a, &b] {
        for worker in &member.workers {
            worker.abort();
        }
        for worker in &member.workers {
            while !worker.is_finished() {
                tokio::task::yield_now().await;
            }
        }
    }
    {
        let record = record.lock().unwrap();
        let taken = record
            .held
            .iter()
            .filter(|held| held.member == "b" && held.at > sent && held.held.is_full())
            .map(|held| held.at - sent)
            .min();
        eprintln!(
            "a stopped {stopped:?} after sending the renewal answered late; b took everything {taken:?} after it"
        );
        if let Some(overlap) = find_overlap(&record) {
            panic!("{overlap}\n{:#?}", record.held);
        }
    }
    b.shard.stop().await;
}

/// Sets its flag when dropped: the reconcile that holds it was cancelled (it never returns).
struct Cancelled(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Cancelled {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A reconcile that never returns (a request without an answer, a deadlock) must not keep its range
/// from a member that joins: once the range has drained for the lease duration, the member giving
/// it up cancels that reconcile and lets the range go, and the new holder reconciles the object.
#[tokio::test]
async fn a_hanging_reconcile_does_not_keep_a_range_from_a_member_that_joins() {
    let env = TestEnv::start().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    // A few objects, one of them (the stuck one) in the part `b` will hold once it joins.
    let part_of_b = Ranges::assigned(&["a", "b"], "b");
    let mut objects = Vec::new();
    while objects.len() < 4
        || !objects
            .iter()
            .any(|c: &ConfigMap| part_of_b.contains(shard::hash(&c.uid().unwrap())))
    {
        let configmap = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("hang-{}", objects.len())),
                labels: Some([(LABEL.to_string(), "hang".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        objects.push(
            api.create(&PostParams::default(), &configmap)
                .await
                .unwrap(),
        );
    }
    let stuck = objects
        .iter()
        .find(|c| part_of_b.contains(shard::hash(&c.uid().unwrap())))
        .unwrap();
    let (stuck, hash) = (stuck.name_any(), shard::hash(&stuck.uid().unwrap()));

    // (member, object) of every reconcile started; `a`'s reconcile of the stuck object never returns.
    let reconciled = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let replica = async |identity: &str| {
        let manager = support::sharded_manager(&env, "hang-test", Some(identity), TIMING).await;
        let (reconciled, cancelled) = (reconciled.clone(), cancelled.clone());
        let (member, stuck) = (identity.to_string(), stuck.clone());
        let reconcile = move |object: Arc<ConfigMap>, _: Arc<()>| {
            let name = object.name_any();
            reconciled
                .lock()
                .unwrap()
                .push((member.clone(), name.clone()));
            let hangs = (member == "a" && name == stuck).then(|| Cancelled(cancelled.clone()));
            async move {
                if let Some(_cancelled) = hangs {
                    std::future::pending::<()>().await;
                }
                Ok::<_, kube::Error>(kube::runtime::controller::Action::await_change())
            }
        };
        let config = watcher::Config::default().labels(&format!("{LABEL}=hang"));
        let controllers = manager.controllers();
        controllers.add(
            manager
                .controller(
                    Api::<ConfigMap>::namespaced(manager.client(), "default"),
                    "hang",
                )
                .watcher_config(config)
                .concurrency(4)
                .run(reconcile, Arc::new(())),
        );
        let running = tokio::spawn(controllers.run());
        (manager, running)
    };
    let reconciled_by = |member: &str, name: &str| {
        let reconciled = reconciled.lock().unwrap();
        reconciled.iter().any(|(m, n)| m == member && n == name)
    };

    let (a, a_running) = replica("a").await;
    let hanging = eventually(Duration::from_secs(10), async || {
        objects.iter().all(|c| reconciled_by("a", &c.name_any()))
    });
    assert!(hanging.await, "a did not reconcile every object");

    let (b, b_running) = replica("b").await;
    let joined = Instant::now();
    let leases: Api<Lease> = Api::namespaced(env.client(), "default");
    // What `a` publishes in its Lease.
    let published_by_a = async || -> Ranges {
        let lease = leases.get("hang-test-shard-a").await.unwrap();
        lease.annotations()[shard::RANGES_ANNOTATION]
            .parse()
            .unwrap()
    };
    let bound = TIMING.lease_duration + Duration::from_secs(5);
    // When b first worked on part of its share without the stuck range: the rest did not wait.
    let rest_first = std::cell::Cell::new(None);
    let handed_over = eventually(bound, async || {
        let b_state = b.shard().unwrap().state().borrow().clone();
        if !b_state.active.is_empty() && !b_state.active.contains(hash) {
            rest_first.set(rest_first.get().or(Some(joined.elapsed())));
        }
        b_state.active.contains(hash)
            && !a.shard().unwrap().state().borrow().held.contains(hash)
            && !published_by_a().await.contains(hash)
            && reconciled_by("b", &stuck)
    })
    .await;
    let (a_state, b_state) = (
        a.shard().unwrap().state().borrow().clone(),
        b.shard().unwrap().state().borrow().clone(),
    );
    assert!(
        handed_over,
        "{stuck}'s range not handed over to b within {bound:?} of b joining: b holds {:.2} of the \
         space, a {:.2} ({:.2} of it draining); a publishes {stuck}'s hash: {}; a's reconcile of \
         {stuck} cancelled: {}; b reconciled {stuck}: {}",
        b_state.held.share(),
        a_state.held.share(),
        a_state.held.difference(&a_state.active).share(),
        published_by_a().await.contains(hash),
        cancelled.load(std::sync::atomic::Ordering::SeqCst),
        reconciled_by("b", &stuck),
    );
    eprintln!(
        "b took {stuck}'s range and reconciled it {:?} after joining, the rest of its part {:?} \
         after joining",
        joined.elapsed(),
        rest_first.get(),
    );
    assert!(cancelled.load(std::sync::atomic::Ordering::SeqCst));
    assert!(
        rest_first.get().is_some(),
        "b got none of its part before the stuck range"
    );
    // `a` holds the rest and stays in the group: the range went, not the member.
    assert_eq!(a_state.held, Ranges::assigned(&["a", "b"], "a"));

    for (manager, running) in [(a, a_running), (b, b_running)] {
        manager.shutdown();
        let stopped = tokio::time::timeout(Duration::from_secs(10), running).await;
        stopped.unwrap().unwrap().unwrap();
    }
}
