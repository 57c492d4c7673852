//! The explorer's client layer: everything one manager incarnation sends and sees goes through it.
//!
//! It records the incarnation's writes, and injects the faults of a perturbation exactly where they
//! belong: it stops the incarnation right after its k-th write reached the API server (the answer
//! never arrives), serves its first lists from an older revision, holds or coalesces the events of
//! one kind's watch, slows one kind's lists, and answers a leader's Lease renewal late and then
//! never again.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use hyper::body::{Body as HttpBody, Bytes, Frame};
use kube::Client;
use kube::client::Body;

/// One write of the operator, as the API server answered it.
#[derive(Clone, Debug)]
pub struct Write {
    /// Which manager process of the run made it: 0 first, 1 the one started after it, ...
    pub incarnation: usize,
    /// The workload step during which it was made (0: before the first operation).
    pub step: usize,
    /// `POST`, `PUT`, `PATCH` (server-side apply included) or `DELETE`.
    pub verb: String,
    /// The object written, as a path without namespace (`apps/v1/deployments/sample`).
    pub object: String,
    /// The subresource written (`status`, `scale`), empty for the object itself.
    pub subresource: String,
    /// The API server's answer; 0 when none came.
    pub code: u16,
    /// When its answer came.
    pub at: Instant,
}

impl Write {
    /// `PATCH apps/v1/deployments/sample/status`, for reports.
    pub fn describe(&self) -> String {
        let sub = match self.subresource.as_str() {
            "" => String::new(),
            sub => format!("/{sub}"),
        };
        format!("{} {}{sub}", self.verb, self.object)
    }
}

/// The writes of a whole run, every incarnation's, in the order their answers came.
#[derive(Default)]
pub(crate) struct Recorder {
    state: Mutex<Recorded>,
}

#[derive(Default)]
struct Recorded {
    writes: Vec<Write>,
    step: usize,
    /// Incarnations that lost their role at an instant: a write of theirs answered later is a
    /// second writer's.
    superseded: Vec<(usize, Instant)>,
    /// Under leader election, when each incarnation began to lead: a write of one before is a
    /// second writer's too.
    leads: Option<Vec<(usize, Instant)>>,
}

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, Recorded> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_step(&self, step: usize) {
        self.lock().step = step;
    }

    pub(crate) fn writes(&self) -> Vec<Write> {
        self.lock().writes.clone()
    }

    pub(crate) fn write_count(&self) -> usize {
        self.lock().writes.len()
    }

    /// `incarnation` may not write from `at` on: another one has taken its place.
    pub(crate) fn supersede(&self, incarnation: usize, at: Instant) {
        self.lock().superseded.push((incarnation, at));
    }

    pub(crate) fn superseded(&self) -> Vec<(usize, Instant)> {
        self.lock().superseded.clone()
    }

    /// `incarnation` leads from `at` on (leader election runs only).
    pub(crate) fn lead(&self, incarnation: usize, at: Instant) {
        self.lock()
            .leads
            .get_or_insert_default()
            .push((incarnation, at));
    }

    pub(crate) fn leads(&self) -> Option<Vec<(usize, Instant)>> {
        self.lock().leads.clone()
    }

    fn record(&self, mut write: Write) {
        let mut state = self.lock();
        write.step = state.step;
        state.writes.push(write);
    }
}

/// How one kind's watch is held: its events delivered as they come, held back, or dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GateMode {
    Open,
    Held,
}

/// The watches of one resource for one incarnation: held (events kept back), released late, or
/// expired (what was held is dropped and the watch ends with `410 Gone`, so the cache relists and
/// sees only the latest state: the states in between are never observed).
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<GateState>,
}

#[derive(Default)]
struct GateState {
    held: bool,
    /// Bumped by each expiry: a watch opened before it ends.
    expiries: u64,
    wakers: Vec<Waker>,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn hold(&self) {
        self.lock().held = true;
    }

    pub(crate) fn is_held(&self) -> bool {
        self.lock().held
    }

    /// Delivers what was held, late.
    pub(crate) fn release(&self) {
        let wakers = {
            let mut state = self.lock();
            state.held = false;
            std::mem::take(&mut state.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Drops what was held and ends the watches with `410 Gone`.
    pub(crate) fn expire(&self) {
        let wakers = {
            let mut state = self.lock();
            state.held = false;
            state.expiries += 1;
            std::mem::take(&mut state.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    fn mode(&self) -> (GateMode, u64) {
        let state = self.lock();
        let mode = if state.held {
            GateMode::Held
        } else {
            GateMode::Open
        };
        (mode, state.expiries)
    }

    fn register(&self, waker: &Waker) {
        let mut state = self.lock();
        if !state.wakers.iter().any(|w| w.will_wake(waker)) {
            state.wakers.push(waker.clone());
        }
    }
}

/// A leader's Lease renewal answered late, then no Lease request answered at all: a leader
/// stalled (a long pause, a slow network) while its Lease runs out.
pub(crate) struct LeaseStall {
    /// How late the answer to the first renewal after [`LeaseStall::start`] comes.
    pub(crate) answer_delay: Duration,
    started: AtomicBool,
    /// Set once that renewal was sent: every later Lease request waits forever, unsent.
    renewal_sent: AtomicBool,
}

impl LeaseStall {
    pub(crate) fn new(answer_delay: Duration) -> Self {
        LeaseStall {
            answer_delay,
            started: AtomicBool::new(false),
            renewal_sent: AtomicBool::new(false),
        }
    }

    pub(crate) fn start(&self) {
        self.started.store(true, Ordering::SeqCst);
    }
}

/// The faults one incarnation meets.
#[derive(Default)]
pub(crate) struct Faults {
    /// Stop right after this write (1 for the first) reached the API server: its answer never
    /// comes, and nothing else is sent or received.
    pub(crate) crash_after_write: Option<usize>,
    /// Serve the first list of this resource at this older revision (the watch then replays
    /// from it).
    pub(crate) stale: Option<(String, String)>,
    /// Answer each list of this resource (a plural, `deployments`) this late.
    pub(crate) slow_lists: Option<(String, Duration)>,
    /// Watches that can be held or expired, by resource.
    pub(crate) gates: Vec<(String, Arc<Gate>)>,
    pub(crate) lease_stall: Option<Arc<LeaseStall>>,
}

/// Whether an incarnation is still alive.
#[derive(Default)]
pub(crate) struct Life {
    dead: AtomicBool,
}

impl Life {
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    pub(crate) fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }
}

/// What an incarnation's watches and lists of the gated resources have handed on: each object's
/// resourceVersion, by the list the cache keeps (collection path and selectors). The explorer
/// takes a run as settled only once this agrees with the API server: no event on its way.
#[derive(Default)]
pub(crate) struct Seen {
    lists: Mutex<HashMap<String, HashMap<String, u64>>>,
}

impl Seen {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, HashMap<String, u64>>> {
        self.lists.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A list's answer: its items replace what was seen, or join it for a further page.
    fn listed(&self, key: &str, body: &[u8], further_page: bool) {
        let Ok(list) = serde_json::from_slice::<serde_json::Value>(body) else {
            return;
        };
        let items = list
            .get("items")
            .and_then(|i| i.as_array())
            .cloned()
            .unwrap_or_default();
        let mut lists = self.lock();
        let seen = lists.entry(key.to_string()).or_default();
        if !further_page {
            seen.clear();
        }
        for item in &items {
            if let Some((name, version)) = name_and_version(item) {
                seen.insert(name, version);
            }
        }
    }

    /// Watch event lines handed on.
    fn watched(&self, key: &str, lines: &[u8]) {
        let mut lists = self.lock();
        let seen = lists.entry(key.to_string()).or_default();
        for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(event) = serde_json::from_slice::<serde_json::Value>(line) else {
                continue;
            };
            let object = event.get("object").cloned().unwrap_or_default();
            let Some((name, version)) = name_and_version(&object) else {
                continue;
            };
            match event.get("type").and_then(|t| t.as_str()) {
                Some("ADDED" | "MODIFIED") => {
                    seen.insert(name, version);
                }
                Some("DELETED") => {
                    seen.remove(&name);
                }
                _ => {}
            }
        }
    }

    /// The lists seen, by the URL that lists the same objects.
    pub(crate) fn lists(&self) -> Vec<(String, HashMap<String, u64>)> {
        self.lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// An object's name and resourceVersion, as a number (etcd's revision).
pub(crate) fn name_and_version(object: &serde_json::Value) -> Option<(String, u64)> {
    let metadata = object.get("metadata")?;
    let name = metadata.get("name")?.as_str()?.to_string();
    let version = metadata.get("resourceVersion")?.as_str()?.parse().ok()?;
    Some((name, version))
}

/// The URL listing what a list or watch request at `uri` covers: its path and its selectors.
fn list_key(uri: &http::Uri) -> String {
    let mut selectors: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| pair.starts_with("labelSelector=") || pair.starts_with("fieldSelector="))
        .collect();
    selectors.sort();
    format!("{}?{}", uri.path(), selectors.join("&"))
}

/// The parts of a request the explorer looks at.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// `apps/v1` or `v1`.
    pub(crate) group_version: String,
    pub(crate) namespace: Option<String>,
    pub(crate) resource: String,
    pub(crate) name: Option<String>,
    pub(crate) subresource: String,
}

impl Target {
    /// The object as a path without its namespace: `apps/v1/deployments/sample`.
    pub(crate) fn object(&self, name: &str) -> String {
        format!("{}/{}/{name}", self.group_version, self.resource)
    }
}

/// Reads `/apis/apps/v1/namespaces/ns/deployments/name/status` (or `/api/v1/...`, cluster-scoped
/// paths) into its parts; `None` for paths that are no resource (`/version`, `/metrics`).
pub(crate) fn parse_path(path: &str) -> Option<Target> {
    let rest = path.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    let (group_version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => (version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => {
            (Some(namespace.to_string()), rest)
        }
        rest => (None, rest),
    };
    let (resource, rest) = rest.split_first()?;
    Some(Target {
        group_version,
        namespace,
        resource: resource.to_string(),
        name: rest.first().map(|n| n.to_string()),
        subresource: rest.get(1).map(|s| s.to_string()).unwrap_or_default(),
    })
}

/// Writes that are the operator's state, not its bookkeeping: not its Lease, events or reviews.
fn is_state_write(method: &http::Method, target: &Target) -> bool {
    let write = [
        http::Method::POST,
        http::Method::PUT,
        http::Method::PATCH,
        http::Method::DELETE,
    ];
    let bookkeeping = [
        "leases",
        "events",
        "tokenreviews",
        "subjectaccessreviews",
        "selfsubjectaccessreviews",
    ];
    write.contains(method) && !bookkeeping.contains(&target.resource.as_str())
}

fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

/// `client` as one incarnation sees it, under `faults`, its writes recorded in `recorder`.
pub(crate) fn tapped(
    client: Client,
    incarnation: usize,
    faults: Arc<Faults>,
    recorder: Arc<Recorder>,
    life: Arc<Life>,
    seen: Arc<Seen>,
) -> Client {
    let default_namespace = client.default_namespace().to_string();
    let writes = Arc::new(AtomicUsize::new(0));
    let listed = Arc::new(Mutex::new(HashSet::<String>::new()));
    let service = tower::service_fn(move |mut request: http::Request<Body>| {
        let (client, faults, recorder, life) = (
            client.clone(),
            faults.clone(),
            recorder.clone(),
            life.clone(),
        );
        let (writes, listed, seen) = (writes.clone(), listed.clone(), seen.clone());
        async move {
            if life.is_dead() {
                return Err(crashed());
            }
            let method = request.method().clone();
            let target = parse_path(request.uri().path());
            let query = request.uri().query().map(str::to_string);
            let watch = is_watch(query.as_deref());
            let list = method == http::Method::GET
                && !watch
                && target.as_ref().is_some_and(|t| t.name.is_none());
            let resource = target
                .as_ref()
                .map(|t| t.resource.clone())
                .unwrap_or_default();
            let uri = request.uri().clone();
            let further_page = query
                .as_deref()
                .is_some_and(|q| q.split('&').any(|p| p.starts_with("continue=")));

            if list
                && let Some((stale, revision)) = &faults.stale
                && *stale == resource
            {
                let first = listed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(resource.clone());
                if first {
                    *request.uri_mut() = at_revision(request.uri(), revision);
                }
            }
            if list
                && let Some((slow, delay)) = &faults.slow_lists
                && *slow == resource
            {
                tokio::time::sleep(*delay).await;
            }
            if resource == "leases"
                && let Some(stall) = &faults.lease_stall
                && stall.started.load(Ordering::SeqCst)
            {
                if stall.renewal_sent.load(Ordering::SeqCst) {
                    // The leader is cut off from its Lease from now on.
                    std::future::pending::<()>().await;
                }
                if method == http::Method::PUT {
                    stall.renewal_sent.store(true, Ordering::SeqCst);
                    let answer = client.send(request).await;
                    tokio::time::sleep(stall.answer_delay).await;
                    return answer.map(|r| r.map(|body| TapBody::new(body, None, life.clone())));
                }
            }

            let state_write = target.as_ref().filter(|t| is_state_write(&method, t));
            let answer = client.send(request).await;
            if life.is_dead() {
                return Err(crashed());
            }
            let Some(target) = state_write else {
                let gated = faults.gates.iter().find(|(r, _)| *r == resource);
                let gate = watch
                    .then_some(gated)
                    .flatten()
                    .map(|(_, gate)| gate.clone());
                // The lists and watches of a gated resource tell what the caches have seen.
                let seeing = (gated.is_some() && (list || watch)).then(|| Seeing {
                    seen: seen.clone(),
                    key: list_key(&uri),
                    list: list.then(|| (Vec::new(), further_page)),
                });
                return answer
                    .map(|r| r.map(|body| TapBody::new(body, gate, life.clone()).seeing(seeing)));
            };

            // A write: read its answer whole, to learn what it made (a POST names its object in
            // the answer only) and to record it before the caller sees it.
            let (code, parts, bytes) = match answer {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    let bytes = http_body_util::BodyExt::collect(body).await?.to_bytes();
                    (parts.status.as_u16(), Some(parts), bytes)
                }
                Err(error) => return Err(error),
            };
            let name = target.name.clone().or_else(|| created_name(&bytes));
            if let Some(name) = name {
                recorder.record(Write {
                    incarnation,
                    step: 0,
                    verb: method.to_string(),
                    object: target.object(&name),
                    subresource: target.subresource.clone(),
                    code,
                    at: Instant::now(),
                });
            }
            let count = writes.fetch_add(1, Ordering::SeqCst) + 1;
            if faults.crash_after_write == Some(count) {
                // Persisted by the API server; the incarnation stops before it sees the answer.
                life.kill();
                return Err(crashed());
            }
            let parts = parts.expect("a response");
            let body = TapBody::new(Body::from(bytes), None, life.clone());
            Ok(http::Response::from_parts(parts, body))
        }
    });
    Client::new(service, default_namespace)
}

fn crashed() -> kube::Error {
    kube::Error::Service("the explorer stopped this manager (a crash)".into())
}

/// The name in the answer to a create, for the record.
fn created_name(bytes: &[u8]) -> Option<String> {
    let object: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let name = object.pointer("/metadata/name")?.as_str()?;
    Some(name.to_string())
}

/// `uri` listing at exactly `revision`: an API server serves that from its watch cache or etcd as
/// long as the revision is not compacted away.
fn at_revision(uri: &http::Uri, revision: &str) -> http::Uri {
    let query = uri.query().unwrap_or_default();
    let kept = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .filter(|pair| {
            !pair.starts_with("resourceVersion=") && !pair.starts_with("resourceVersionMatch=")
        });
    let mut pairs: Vec<String> = kept.map(str::to_string).collect();
    pairs.push(format!("resourceVersion={revision}"));
    pairs.push("resourceVersionMatch=Exact".into());
    let path_and_query = format!("{}?{}", uri.path(), pairs.join("&"));
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().expect("a valid path and query"));
    http::Uri::from_parts(parts).expect("a valid uri")
}

/// A watch event that ends a watch as an API server does when its revision was compacted.
fn gone_event() -> Bytes {
    let status = serde_json::json!({
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "too old resource version: the explorer expired this watch",
            "reason": "Expired",
            "code": 410,
        },
    });
    let mut line = serde_json::to_vec(&status).expect("JSON");
    line.push(b'\n');
    Bytes::from(line)
}

/// A response body that ends when its incarnation dies, and, for a gated watch, hands on whole
/// event lines only, held or dropped as its gate says.
pub(crate) struct TapBody {
    inner: Body,
    gate: Option<Arc<Gate>>,
    life: Arc<Life>,
    /// The expiries of the gate when the watch opened: a later one ends it.
    expiries: u64,
    /// Bytes of an event line not yet complete.
    partial: Vec<u8>,
    /// Whole lines held back.
    held: Vec<u8>,
    inner_done: bool,
    ended: bool,
    seeing: Option<Seeing>,
}

/// Where a body tells what it hands on: a list's items once it has ended (with the bytes so far,
/// and whether it is a further page), a watch's events as they go.
struct Seeing {
    seen: Arc<Seen>,
    key: String,
    list: Option<(Vec<u8>, bool)>,
}

impl TapBody {
    fn seeing(mut self, seeing: Option<Seeing>) -> Self {
        self.seeing = seeing;
        self
    }

    /// Watch event lines handed on.
    fn handed_on(&self, lines: &[u8]) {
        if let Some(seeing) = &self.seeing {
            seeing.seen.watched(&seeing.key, lines);
        }
    }

    fn new(inner: Body, gate: Option<Arc<Gate>>, life: Arc<Life>) -> Self {
        let expiries = gate.as_ref().map_or(0, |g| g.mode().1);
        TapBody {
            inner,
            gate,
            life,
            expiries,
            partial: Vec::new(),
            held: Vec::new(),
            inner_done: false,
            ended: false,
            seeing: None,
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl HttpBody for TapBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if this.ended || this.life.is_dead() {
                this.ended = true;
                return Poll::Ready(None);
            }
            let Some(gate) = this.gate.clone() else {
                let polled = Pin::new(&mut this.inner).poll_frame(cx);
                if let Some(Seeing {
                    seen,
                    key,
                    list: Some((bytes, further_page)),
                }) = &mut this.seeing
                {
                    match &polled {
                        Poll::Ready(Some(Ok(frame))) => {
                            if let Some(data) = frame.data_ref() {
                                bytes.extend_from_slice(data);
                            }
                        }
                        Poll::Ready(None) => seen.listed(key, bytes, *further_page),
                        _ => {}
                    }
                }
                return polled.map_err(|e| Box::new(e) as BoxError);
            };
            let (mode, expiries) = gate.mode();
            if expiries > this.expiries {
                this.held.clear();
                this.ended = true;
                return Poll::Ready(Some(Ok(Frame::data(gone_event()))));
            }
            if mode == GateMode::Open && !this.held.is_empty() {
                let held = std::mem::take(&mut this.held);
                this.handed_on(&held);
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(held)))));
            }
            if this.inner_done {
                if mode == GateMode::Held {
                    gate.register(cx.waker());
                    return Poll::Pending;
                }
                this.ended = true;
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    this.partial.extend_from_slice(&data);
                    let Some(end) = this.partial.iter().rposition(|b| *b == b'\n') else {
                        continue;
                    };
                    let rest = this.partial.split_off(end + 1);
                    let lines = std::mem::replace(&mut this.partial, rest);
                    if mode == GateMode::Held {
                        this.held.extend_from_slice(&lines);
                        continue;
                    }
                    this.handed_on(&lines);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(lines)))));
                }
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(Box::new(error)))),
                Poll::Ready(None) => this.inner_done = true,
                Poll::Pending => {
                    gate.register(cx.waker());
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_parts() {
        let target = parse_path("/apis/apps/v1/namespaces/team/deployments/web/scale").unwrap();
        assert_eq!(target.group_version, "apps/v1");
        assert_eq!(target.namespace.as_deref(), Some("team"));
        assert_eq!(target.resource, "deployments");
        assert_eq!(target.name.as_deref(), Some("web"));
        assert_eq!(target.subresource, "scale");
        assert_eq!(target.object("web"), "apps/v1/deployments/web");

        let namespace = parse_path("/api/v1/namespaces/team").unwrap();
        assert_eq!(
            (namespace.resource.as_str(), namespace.name.as_deref()),
            ("namespaces", Some("team"))
        );
        let list = parse_path("/apis/batch/v1/jobs").unwrap();
        assert_eq!((list.namespace, list.name), (None, None));
        assert!(parse_path("/version").is_none());
    }

    #[test]
    fn a_stale_list_asks_for_its_exact_revision() {
        let uri: http::Uri = "https://k8s/apis/apps/v1/deployments?limit=500&resourceVersion=0"
            .parse()
            .unwrap();
        let stale = at_revision(&uri, "42");
        assert_eq!(
            stale.to_string(),
            "https://k8s/apis/apps/v1/deployments?limit=500&resourceVersion=42&resourceVersionMatch=Exact"
        );
    }

    #[test]
    fn bookkeeping_is_no_state_write() {
        let post = http::Method::POST;
        let events = parse_path("/apis/events.k8s.io/v1/namespaces/a/events").unwrap();
        let lease = parse_path("/apis/coordination.k8s.io/v1/namespaces/a/leases/x").unwrap();
        let jobs = parse_path("/apis/batch/v1/namespaces/a/jobs").unwrap();
        assert!(!is_state_write(&post, &events) && !is_state_write(&http::Method::PUT, &lease));
        assert!(is_state_write(&post, &jobs) && !is_state_write(&http::Method::GET, &jobs));
    }

    #[test]
    fn what_lists_and_watches_hand_on_is_seen_by_name_and_version() {
        let seen = Seen::default();
        let key = "/api/v1/namespaces/a/configmaps?labelSelector=x";
        let item = |name: &str, version: u64| serde_json::json!({ "metadata": { "name": name, "resourceVersion": version.to_string() } });
        let list = serde_json::json!({ "items": [item("one", 5), item("two", 6)] });
        seen.listed(key, &serde_json::to_vec(&list).unwrap(), false);
        let event = |kind: &str, name: &str, version: u64| {
            let mut line = serde_json::to_vec(
                &serde_json::json!({ "type": kind, "object": item(name, version) }),
            )
            .unwrap();
            line.push(b'\n');
            line
        };
        let lines = [
            event("MODIFIED", "one", 7),
            event("DELETED", "two", 8),
            event("ADDED", "three", 9),
        ]
        .concat();
        seen.watched(key, &lines);
        let lists = seen.lists();
        assert_eq!(lists.len(), 1);
        let (url, objects) = &lists[0];
        assert_eq!(url, key);
        assert_eq!(
            objects,
            &HashMap::from([("one".to_string(), 7), ("three".to_string(), 9)])
        );
        let uri: http::Uri =
            "https://k/api/v1/namespaces/a/configmaps?watch=true&labelSelector=x&resourceVersion=3"
                .parse()
                .unwrap();
        assert_eq!(list_key(&uri), key);
    }

    /// A body of the given chunks, as a watch's.
    fn watch_body(chunks: &[&str]) -> Body {
        let bytes: Vec<u8> = chunks.concat().into_bytes();
        Body::from(bytes)
    }

    async fn read_all(mut body: TapBody) -> String {
        let mut out = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            if let Ok(data) = frame.unwrap().into_data() {
                out.extend_from_slice(&data);
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn an_expired_gate_drops_what_it_held_and_ends_with_gone() {
        let gate = Arc::new(Gate::default());
        let life = Arc::new(Life::default());
        let body = TapBody::new(
            watch_body(&["{\"a\":1}\n{\"b\"", ":2}\n"]),
            Some(gate.clone()),
            life,
        );
        gate.hold();
        let reading = tokio::spawn(read_all(body));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!reading.is_finished(), "a held watch delivers nothing");
        gate.expire();
        let read = reading.await.unwrap();
        assert!(!read.contains("\"a\""), "{read}");
        assert!(
            read.contains("\"code\":410") && read.ends_with('\n'),
            "{read}"
        );
    }

    #[tokio::test]
    async fn a_released_gate_delivers_whole_lines_late() {
        let gate = Arc::new(Gate::default());
        let life = Arc::new(Life::default());
        let body = TapBody::new(
            watch_body(&["{\"a\":1}\n{\"b\":2}\n"]),
            Some(gate.clone()),
            life,
        );
        gate.hold();
        let reading = tokio::spawn(read_all(body));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!reading.is_finished());
        gate.release();
        assert_eq!(reading.await.unwrap(), "{\"a\":1}\n{\"b\":2}\n");
    }
}
