//! The fence of a shard member: until when its writes are safe, and a client layer that refuses the
//! writes made after that.
//!
//! The other members take a member's ranges once its Lease has gone unrenewed for the lease duration,
//! counted from when *they* saw its last renewal. That renewal was sent before they saw it, so a
//! member is safe while `sent + renew deadline` lies ahead (the rest of the lease duration is the
//! margin for a request on its way, and for clocks running at slightly different rates). A member
//! paused for longer (throttled, stopped, starved of CPU) wakes up past its fence: every write it
//! would make then may meet another member's work on the same object. So, once the fence has passed,
//! [`Shard::enter`](super::Shard::enter) admits nothing, a reconcile in flight is cancelled
//! ([`Fence::passed`]), and the manager's client refuses any write before it is sent
//! ([`FenceLayer`]); the member's own Lease requests, and reviews (TokenReview,
//! SubjectAccessReview), are let through.
//!
//! A write is checked again each time its request is driven, until its answer comes: one that
//! passed the fence and then waited (for a connection, for the CPU, or in a process paused right
//! then) is abandoned once the fence has passed, before the client hands it to a connection, so it
//! is not sent late.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::{BoxFuture, Either};
use hyper::{Method, Request};
use tokio::sync::watch;

/// Until when a member's writes are safe: open (no membership yet, or never renewed: nothing to
/// fence), open until an instant, or passed. Cheap to clone; clones share the deadline.
#[derive(Clone)]
pub struct Fence {
    until: Arc<watch::Sender<Until>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Until {
    /// Not a member, or not renewed yet: writes are not fenced.
    Unfenced,
    /// Safe until this instant.
    At(Instant),
}

impl Default for Fence {
    fn default() -> Self {
        Fence::new()
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self.until.borrow() {
            Until::Unfenced => f.write_str("Fence(unfenced)"),
            Until::At(at) => match at.checked_duration_since(Instant::now()) {
                Some(left) => write!(f, "Fence(open for {left:?})"),
                None => f.write_str("Fence(passed)"),
            },
        }
    }
}

impl Fence {
    /// A fence that lets everything through until a member sets it.
    pub fn new() -> Self {
        Fence {
            until: Arc::new(watch::Sender::new(Until::Unfenced)),
        }
    }

    /// Whether writes are safe now.
    pub fn is_open(&self) -> bool {
        match *self.until.borrow() {
            Until::Unfenced => true,
            Until::At(at) => Instant::now() < at,
        }
    }

    /// Resolves once the fence has passed (at once if it has): stop what the member does.
    pub async fn passed(&self) {
        let mut until = self.until.subscribe();
        loop {
            let current = *until.borrow_and_update();
            match current {
                Until::Unfenced => {
                    if until.changed().await.is_err() {
                        return std::future::pending().await;
                    }
                }
                Until::At(at) if Instant::now() >= at => return,
                Until::At(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at.into()) => {}
                        changed = until.changed() => if changed.is_err() {
                            return std::future::pending().await;
                        },
                    }
                }
            }
        }
    }

    /// Resolves once the fence is open (at once if it is): a renewal came in time again.
    pub(crate) async fn opened(&self) {
        // Subscribed before looking: an opening after the look wakes `changed`.
        let mut until = self.until.subscribe();
        loop {
            if self.is_open() {
                return;
            }
            if until.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Safe until `at` (a renewal sent at `at - renew deadline` succeeded).
    pub(crate) fn open_until(&self, at: Instant) {
        self.until.send_replace(Until::At(at));
    }

    /// Passed from now on: the member lost its place, or gave everything up.
    pub(crate) fn close(&self) {
        self.until.send_replace(Until::At(Instant::now()));
    }

    /// A layer for the API client (`kube::client::ClientBuilder::with_layer`) that refuses a write
    /// once this fence has passed, before sending it.
    pub fn layer(&self) -> FenceLayer {
        FenceLayer {
            fence: self.clone(),
            writer: None,
        }
    }

    /// [`Fence::layer`], sending the fenced writes through `writer`, a client whose connections
    /// run on a [`FencedExecutor`] of this fence.
    pub(crate) fn layer_with_writer(&self, writer: kube::Client) -> FenceLayer {
        FenceLayer {
            fence: self.clone(),
            writer: Some(writer),
        }
    }
}

/// Runs the HTTP connections of the client that sends a member's fenced writes, each only while
/// the fence is open: a connection polled past the fence is dropped, with whatever it had still
/// to send.
///
/// Checking a write when it is handed to the HTTP client is not enough: the client queues it for
/// a connection task, which writes it to the socket when it next runs. A process paused (SIGSTOP,
/// a frozen VM) right after the hand-over would, once resumed, send the write first thing, long
/// past the fence, before anything else could look. The connection task is where the bytes go
/// out, so it is where the fence is checked last.
#[derive(Clone, Debug)]
pub(crate) struct FencedExecutor {
    fence: Fence,
}

impl FencedExecutor {
    pub(crate) fn new(fence: &Fence) -> Self {
        FencedExecutor {
            fence: fence.clone(),
        }
    }
}

impl<F> hyper::rt::Executor<F> for FencedExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, connection: F) {
        let fence = self.fence.clone();
        let mut connection = Box::pin(connection);
        tokio::spawn(futures::future::poll_fn(move |cx| {
            if !fence.is_open() {
                return Poll::Ready(());
            }
            connection.as_mut().poll(cx)
        }));
    }
}

/// A write refused because the shard member's fence had passed: not sent, or abandoned while it
/// waited for an answer.
#[derive(Clone, Debug, thiserror::Error)]
#[error(
    "{}: {method} {path}: this shard member was not renewed in time, so another may work on the object now",
    if *.abandoned { "abandoned" } else { "not sent" }
)]
pub struct Fenced {
    method: Method,
    path: String,
    /// Refused after the request had been handed on: it may have reached the API server.
    abandoned: bool,
}

/// The client layer of [`Fence::layer`].
#[derive(Clone)]
pub struct FenceLayer {
    fence: Fence,
    /// Where fenced writes go, if not to the inner service (see [`FencedExecutor`]).
    writer: Option<kube::Client>,
}

impl fmt::Debug for FenceLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceLayer")
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl<S> tower::Layer<S> for FenceLayer {
    type Service = FenceService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FenceService {
            inner,
            fence: self.fence.clone(),
            writer: self.writer.clone(),
        }
    }
}

/// The service [`FenceLayer`] makes.
#[derive(Clone)]
pub struct FenceService<S> {
    inner: S,
    fence: Fence,
    writer: Option<kube::Client>,
}

impl<S> fmt::Debug for FenceService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceService")
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// Whether a request changes what other members may work on: a write, other than to Leases (the
/// member's own renewals, leader election) and other than a review (which stores nothing).
fn is_fenced_write<B>(request: &Request<B>) -> bool {
    let write = matches!(
        *request.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    const UNFENCED: [&str; 3] = [
        "/apis/coordination.k8s.io/",
        "/apis/authentication.k8s.io/",
        "/apis/authorization.k8s.io/",
    ];
    let path = request.uri().path();
    write && !UNFENCED.iter().any(|prefix| path.starts_with(prefix))
}

/// The response of kube's client stack, which a [`FenceService`] sits in.
pub(crate) type Answer = http::Response<Box<kube::client::DynBody>>;

/// What [`kube::Client::send`] answered, as kube's client stack answers.
pub(crate) fn boxed(answer: http::Response<kube::client::Body>) -> Answer {
    use http_body_util::BodyExt;
    answer.map(|body| Box::new(body.map_err(tower::BoxError::from)) as Box<kube::client::DynBody>)
}

impl<S> tower::Service<Request<kube::client::Body>> for FenceService<S>
where
    S: tower::Service<Request<kube::client::Body>, Response = Answer>,
    S::Future: Send + 'static,
    S::Error: From<Fenced> + From<kube::Error> + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<S::Future, BoxFuture<'static, Result<S::Response, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        if !is_fenced_write(&request) {
            return Either::Left(self.inner.call(request));
        }
        let mut refused = Fenced {
            method: request.method().clone(),
            path: request.uri().path().to_string(),
            abandoned: false,
        };
        if !self.fence.is_open() {
            return Either::Right(Box::pin(async move { Err(refused.into()) }));
        }
        // Checked again before every poll of the request: a write that waited past the fence is
        // dropped unpolled, and the HTTP client does not send a request whose caller is gone
        // (unless its connection task runs first: the writer's connections check the fence too).
        let fence = self.fence.clone();
        let sending: BoxFuture<'static, Result<S::Response, S::Error>> = match &self.writer {
            Some(writer) => {
                let writer = writer.clone();
                Box::pin(async move { Ok(boxed(writer.send(request).await?)) })
            }
            None => Box::pin(self.inner.call(request)),
        };
        let mut sending = Some(sending);
        Either::Right(Box::pin(futures::future::poll_fn(
            move |cx| match sending.as_mut() {
                Some(request) if fence.is_open() => request.as_mut().poll(cx),
                _ => {
                    sending = None;
                    refused.abandoned = true;
                    Poll::Ready(Err(refused.clone().into()))
                }
            },
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use kube::client::Body;

    fn answer() -> Answer {
        boxed(http::Response::new(Body::empty()))
    }

    fn sent_request(method: Method, path: &str) -> Request<Body> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap()
    }

    fn request(method: Method, path: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
    }

    #[test]
    fn writes_are_fenced_leases_reads_and_reviews_are_not() {
        let fenced = |method, path| is_fenced_write(&request(method, path));
        assert!(fenced(
            Method::PATCH,
            "/apis/apps/v1/namespaces/a/deployments/d"
        ));
        assert!(fenced(Method::POST, "/api/v1/namespaces/a/events"));
        assert!(fenced(Method::DELETE, "/apis/batch/v1/namespaces/a/jobs/j"));
        assert!(!fenced(
            Method::GET,
            "/apis/apps/v1/namespaces/a/deployments/d"
        ));
        let lease = "/apis/coordination.k8s.io/v1/namespaces/a/leases/l";
        assert!(!fenced(Method::PUT, lease));
        assert!(!fenced(
            Method::POST,
            "/apis/authentication.k8s.io/v1/tokenreviews"
        ));
    }

    #[tokio::test]
    async fn a_fence_passes_at_its_deadline_and_is_extended_by_a_renewal() {
        let fence = Fence::new();
        assert!(fence.is_open(), "nothing to fence before the first renewal");
        fence.open_until(Instant::now() + Duration::from_millis(200));
        assert!(fence.is_open());
        let passed = tokio::spawn({
            let fence = fence.clone();
            async move {
                fence.passed().await;
                Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let extended = Instant::now() + Duration::from_millis(300);
        fence.open_until(extended);
        let at = passed.await.unwrap();
        assert!(at >= extended, "passed before the renewed deadline");
        assert!(!fence.is_open());
        fence.close();
        tokio::time::timeout(Duration::from_millis(50), fence.passed())
            .await
            .expect("a closed fence has passed");
    }

    #[tokio::test]
    async fn a_passed_fence_opens_again_at_a_renewal() {
        let fence = Fence::new();
        let quick = Duration::from_millis(50);
        let open = tokio::time::timeout(quick, fence.opened()).await;
        assert!(open.is_ok(), "an unfenced fence is open");
        fence.close();
        let opened = tokio::spawn({
            let fence = fence.clone();
            async move { fence.opened().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!opened.is_finished(), "opened while passed");
        fence.open_until(Instant::now() + Duration::from_secs(5));
        let reopened = tokio::time::timeout(quick, opened).await;
        assert!(reopened.is_ok(), "not opened by a renewal");
    }

    #[tokio::test]
    async fn a_passed_fence_refuses_writes_before_they_are_sent() {
        use tower::{Layer, Service, ServiceExt};
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = sent.clone();
        let inner = tower::service_fn(move |_: Request<Body>| {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok::<_, tower::BoxError>(answer()) }
        });
        let fence = Fence::new();
        let mut service = fence.layer().layer(inner);
        let write = || sent_request(Method::PATCH, "/api/v1/namespaces/a/configmaps/c");
        service.ready().await.unwrap().call(write()).await.unwrap();
        fence.close();
        let refused = service.ready().await.unwrap().call(write()).await;
        let Err(refused) = refused else {
            panic!("a write sent past the fence")
        };
        let message = refused.to_string();
        assert!(message.contains("not renewed in time"), "{message}");
        service
            .ready()
            .await
            .unwrap()
            .call(sent_request(
                Method::GET,
                "/api/v1/namespaces/a/configmaps/c",
            ))
            .await
            .unwrap();
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_write_that_waited_past_the_fence_is_abandoned_unsent() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use tower::{Layer, Service, ServiceExt};
        // The inner service stands for the HTTP client's hand-over: its request is queued when its
        // future is first polled (as hyper hands a request to a connection once it has one).
        let sent = Arc::new(AtomicBool::new(false));
        let marker = sent.clone();
        let inner = tower::service_fn(move |_: Request<Body>| {
            let marker = marker.clone();
            async move {
                marker.store(true, Ordering::SeqCst);
                Ok::<_, tower::BoxError>(answer())
            }
        });
        let fence = Fence::new();
        fence.open_until(Instant::now() + Duration::from_secs(5));
        let mut service = fence.layer().layer(inner);
        let write = sent_request(Method::PATCH, "/api/v1/namespaces/a/configmaps/c");
        // Past the check at the call, then the fence passes before the request is driven (the
        // process paused, or a connection slow to come).
        let waiting = service.ready().await.unwrap().call(write);
        fence.close();
        let Err(abandoned) = waiting.await else {
            panic!("a write sent after the fence passed")
        };
        let abandoned = abandoned.to_string();
        assert!(abandoned.starts_with("abandoned: PATCH"), "{abandoned}");
        assert!(
            !sent.load(Ordering::SeqCst),
            "the write was sent after the fence passed"
        );
    }

    /// A connection task scheduled while the fence was open (a write queued on it) and first run
    /// after the fence passed (the process paused in between) sends nothing: it is dropped unrun.
    #[tokio::test(flavor = "current_thread")]
    async fn a_connection_run_past_the_fence_is_dropped_unrun() {
        use hyper::rt::Executor;
        use std::sync::atomic::{AtomicBool, Ordering};
        let fence = Fence::new();
        fence.open_until(Instant::now() + Duration::from_secs(5));
        let executor = FencedExecutor::new(&fence);
        let ran = Arc::new(AtomicBool::new(false));
        let marker = ran.clone();
        // Spawned, not yet run: the current-thread runtime runs it at the next yield.
        executor.execute(async move { marker.store(true, Ordering::SeqCst) });
        fence.close();
        tokio::task::yield_now().await;
        assert!(
            !ran.load(Ordering::SeqCst),
            "a connection ran past the fence"
        );
        // While the fence is open, connections run.
        fence.open_until(Instant::now() + Duration::from_secs(5));
        let marker = ran.clone();
        executor.execute(async move { marker.store(true, Ordering::SeqCst) });
        tokio::task::yield_now().await;
        assert!(
            ran.load(Ordering::SeqCst),
            "a connection did not run inside the fence"
        );
    }
}
