//! Lists and watches with a `shardSelector`, which kube's request parameters do not have, and
//! finding out whether the API server applies it.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use hyper::{Method, Request, Response};
use kube::client::Body;
use kube::{Api, Client, Resource};
use tracing::info;

use super::range::{Range, Ranges};

/// Where the objects outside a member's ranges are left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filtering {
    /// The API server applies the `shardSelector` of lists and watches (Kubernetes 1.36 or later
    /// with the `ShardedListAndWatch` feature gate): a member receives only its own objects.
    Server,
    /// The API server ignores it: a member receives every object and drops the others by the same
    /// hash. Correct, without the savings.
    Client,
}

impl fmt::Display for Filtering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Filtering::Server => "server-side shard selector",
            Filtering::Client => "filtering on the client",
        })
    }
}

/// Whether the API server applies a `shardSelector` to the lists of `api`: one list of at most
/// one object with a selector, whose answer carries `metadata.shardInfo` if it was applied. Logs
/// which [`Filtering`] the caches of `api`'s kind will use.
///
/// The API server filters the lists and watches of custom resources too, but their lists do not
/// echo `shardInfo` (Kubernetes 1.36): for a custom resource, ask of a built-in kind the manager
/// may list, as [`Cache::sharded`](crate::cache::Cache::sharded) does with the group's Leases.
pub async fn detect<K>(api: &Api<K>) -> kube::Result<Filtering>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let filtering = if applies_selector(api).await? {
        Filtering::Server
    } else {
        Filtering::Client
    };
    info!(kind = %K::kind(&()), "sharded watches: {filtering}");
    Ok(filtering)
}

/// Whether a list of `api` with a `shardSelector` comes back with `metadata.shardInfo`.
pub(crate) async fn applies_selector<K>(api: &Api<K>) -> kube::Result<bool>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let selector = Ranges::from(Range::part(0, 2)).selector();
    let selector = selector.expect("half of the space is not empty");
    let uri = format!(
        "{}?limit=1&shardSelector={}",
        api.resource_url(),
        encode(&selector)
    );
    let request = Request::get(uri)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    let client = api.clone().into_client();
    let list: serde_json::Value = client.request(request).await?;
    Ok(list.pointer("/metadata/shardInfo").is_some())
}

/// A client that sends every request through `client`, adding `shardSelector=<selector>` to
/// lists and watches (GETs of a collection): give it to an `Api` that a watcher lists and watches
/// with, and the API server sends only the objects of those ranges. Requests for one object, and
/// other verbs, go unchanged. Must be called within a Tokio runtime.
pub fn selecting_client(client: &Client, selector: &str) -> Client {
    let service = SelectingService {
        client: client.clone(),
        query: Arc::from(format!("shardSelector={}", encode(selector))),
    };
    Client::new(service, client.default_namespace())
}

#[derive(Clone)]
struct SelectingService {
    client: Client,
    /// `shardSelector=…`, encoded.
    query: Arc<str>,
}

impl tower::Service<Request<Body>> for SelectingService {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // `Client::send` waits for room itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        if request.method() == Method::GET && is_collection(request.uri().path()) {
            let uri = request.uri();
            let with_selector = match uri.query() {
                Some(query) if !query.is_empty() => {
                    format!("{}?{query}&{}", uri.path(), self.query)
                }
                _ => format!("{}?{}", uri.path(), self.query),
            };
            // A valid URI with more valid query characters stays valid.
            if let Ok(with_selector) = with_selector.parse() {
                *request.uri_mut() = with_selector;
            }
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await })
    }
}

/// Whether `path` names a collection (`/api/v1/configmaps`, `/apis/apps/v1/namespaces/ns/deployments`)
/// rather than one object or a subresource.
fn is_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.first() {
        Some(&"api") if segments.len() >= 2 => &segments[2..],
        Some(&"apis") if segments.len() >= 3 => &segments[3..],
        _ => return false,
    };
    match rest {
        [_resource] => true,
        // `namespaces/<name>/status` and `…/finalize` are subresources of one namespace.
        ["namespaces", _, "status" | "finalize"] => false,
        ["namespaces", _, _resource] => true,
        _ => false,
    }
}

/// Percent-encodes `text` for a query value: letters, digits and `-._~` stay.
fn encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len() * 2);
    for byte in text.bytes() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                encoded.push(char::from(byte));
            }
            _ => encoded.push_str(&format!("%{byte:02X}")),
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collections_are_told_from_objects() {
        for collection in [
            "/api/v1/configmaps",
            "/api/v1/namespaces",
            "/api/v1/namespaces/default/configmaps",
            "/apis/apps/v1/deployments",
            "/apis/cache.example.com/v1alpha1/namespaces/ns/memcacheds",
        ] {
            assert!(is_collection(collection), "{collection}");
        }
        for object in [
            "/api/v1/namespaces/default",
            "/api/v1/namespaces/default/status",
            "/api/v1/namespaces/default/configmaps/one",
            "/apis/apps/v1/namespaces/ns/deployments/web/scale",
            "/apis/apps/v1",
            "/version",
        ] {
            assert!(!is_collection(object), "{object}");
        }
    }

    #[test]
    fn selectors_are_encoded_for_a_query() {
        assert_eq!(
            encode("shardRange(object.metadata.uid, '0x00', '0x10') || x"),
            "shardRange%28object.metadata.uid%2C%20%270x00%27%2C%20%270x10%27%29%20%7C%7C%20x"
        );
    }

    #[tokio::test]
    async fn lists_and_watches_get_the_selector_and_nothing_else_does() {
        let (service, mut handle) = tower_test_like::pair();
        let client = Client::new(service, "default");
        let selecting = selecting_client(&client, "shardRange(a, '0x0', '0x1')");
        let selector = "shardSelector=shardRange%28a%2C%20%270x0%27%2C%20%270x1%27%29";
        let cases = [
            (
                "GET",
                "/api/v1/configmaps?watch=true",
                format!("/api/v1/configmaps?watch=true&{selector}"),
            ),
            (
                "GET",
                "/api/v1/namespaces/a/configmaps",
                format!("/api/v1/namespaces/a/configmaps?{selector}"),
            ),
            (
                "GET",
                "/api/v1/namespaces/a/configmaps/b",
                "/api/v1/namespaces/a/configmaps/b".to_string(),
            ),
            (
                "POST",
                "/api/v1/namespaces/a/configmaps",
                "/api/v1/namespaces/a/configmaps".to_string(),
            ),
        ];
        for (method, uri, expected) in cases {
            let request = Request::builder()
                .method(method)
                .uri(uri)
                .body(Body::empty())
                .unwrap();
            let sending = tokio::spawn({
                let selecting = selecting.clone();
                async move { selecting.send(request).await.map(|r| r.status()) }
            });
            let seen = handle.next().await;
            assert_eq!(seen, expected, "{method} {uri}");
            assert_eq!(sending.await.unwrap().unwrap(), 200);
        }
    }

    /// A service that hands each request's URI to the test and answers 200.
    mod tower_test_like {
        use super::*;
        use tokio::sync::mpsc;

        pub struct Handle(mpsc::UnboundedReceiver<String>);

        impl Handle {
            pub async fn next(&mut self) -> String {
                self.0.recv().await.expect("a request")
            }
        }

        #[derive(Clone)]
        pub struct Recorder(mpsc::UnboundedSender<String>);

        impl tower::Service<Request<Body>> for Recorder {
            type Response = Response<Body>;
            type Error = std::convert::Infallible;
            type Future = futures::future::Ready<Result<Response<Body>, Self::Error>>;

            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, request: Request<Body>) -> Self::Future {
                let _ = self.0.send(request.uri().to_string());
                futures::future::ready(Ok(Response::new(Body::empty())))
            }
        }

        pub fn pair() -> (Recorder, Handle) {
            let (sender, receiver) = mpsc::unbounded_channel();
            (Recorder(sender), Handle(receiver))
        }
    }
}
