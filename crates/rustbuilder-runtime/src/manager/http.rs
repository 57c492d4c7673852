//! The manager's HTTP endpoints: `/healthz` and `/readyz` for the kubelet's probes (plain HTTP), and
//! `/metrics` for Prometheus. Metrics are served over HTTPS by default, each request authenticated with
//! a TokenReview and authorized with a SubjectAccessReview ([`super::auth`]), so only those granted `get`
//! on the non-resource URL `/metrics` (the `metrics-reader` ClusterRole) can read them.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::FutureExt;
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio_rustls::TlsAcceptor;
use tracing::info;

use super::auth::Authorizer;
use super::{Error, Manager};
use crate::metrics;
use crate::serve::{BindAddress, Handler, listen, local_address, serve, text};

/// Serves `/healthz` (200 while the process runs) and `/readyz` (200 once [`Manager::ready`] says so,
/// else 503 with the reason) until the process exits. Returns the address it listens on, or `None`
/// when `address` is `0`.
pub async fn serve_probes(
    address: &BindAddress,
    manager: Manager,
) -> Result<Option<SocketAddr>, Error> {
    let Some(listener) = listen(address).await? else {
        return Ok(None);
    };
    let bound = local_address(&listener, address)?;
    info!(address = %bound, "serving health probes");
    let handler: Handler = Arc::new(move |request| {
        let response = match request.uri().path() {
            "/healthz" => text(StatusCode::OK, "ok"),
            "/readyz" => match manager.ready() {
                Ok(()) => text(StatusCode::OK, "ok"),
                Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, &reason),
            },
            _ => text(StatusCode::NOT_FOUND, "not found"),
        };
        futures::future::ready(response).boxed()
    });
    tokio::spawn(serve(listener, None, handler, futures::future::pending()));
    Ok(Some(bound))
}

/// Serves `/metrics` until the process exits: over TLS with authentication and authorization through
/// the API server when `tls` is given, else over plain HTTP to anyone. Returns the address it listens
/// on, or `None` when `address` is `0`.
pub async fn serve_metrics(
    address: &BindAddress,
    manager: Manager,
    tls: Option<TlsAcceptor>,
) -> Result<Option<SocketAddr>, Error> {
    let Some(listener) = listen(address).await? else {
        return Ok(None);
    };
    let bound = local_address(&listener, address)?;
    let secure = tls.is_some();
    info!(address = %bound, secure, "serving metrics");
    let authorizer = secure.then(|| Arc::new(Authorizer::new(manager.client())));
    let handler: Handler = Arc::new(move |request| {
        let (manager, authorizer) = (manager.clone(), authorizer.clone());
        async move {
            let (path, verb) = (request.uri().path(), verb(request.method()));
            let token = bearer_token(&request);
            let authorized = match &authorizer {
                Some(authorizer) => authorizer.authorize(token, path, &verb).await,
                None => Ok(()),
            };
            if let Err(status) = authorized {
                let reason = status.canonical_reason().unwrap_or("denied");
                return text(status, reason);
            }
            if request.uri().path() != "/metrics" {
                return text(StatusCode::NOT_FOUND, "not found");
            }
            let mut response = Response::new(manager.metrics().encode());
            let content_type = HeaderValue::from_static(metrics::CONTENT_TYPE);
            response.headers_mut().insert(CONTENT_TYPE, content_type);
            response
        }
        .boxed()
    });
    tokio::spawn(serve(listener, tls, handler, futures::future::pending()));
    Ok(Some(bound))
}

/// The bearer token of a request, if any.
fn bearer_token(request: &Request<Incoming>) -> Option<&str> {
    request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty())
}

/// The RBAC verb of an HTTP method on a non-resource URL.
fn verb(method: &Method) -> String {
    match *method {
        Method::GET | Method::HEAD => "get".into(),
        Method::POST => "create".into(),
        Method::PUT => "update".into(),
        Method::PATCH => "patch".into(),
        Method::DELETE => "delete".into(),
        ref other => other.as_str().to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs() {
        assert_eq!(verb(&Method::GET), "get");
        assert_eq!(verb(&Method::HEAD), "get");
        assert_eq!(verb(&Method::POST), "create");
        assert_eq!(verb(&Method::OPTIONS), "options");
    }
}
