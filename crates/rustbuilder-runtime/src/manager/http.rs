//! The manager's HTTP endpoints: `/healthz` and `/readyz` for the kubelet's probes (plain HTTP), and
//! `/metrics` for Prometheus. Metrics are served over HTTPS by default, each request authenticated with
//! a TokenReview and authorized with a SubjectAccessReview ([`super::auth`]), so only those granted `get`
//! on the non-resource URL `/metrics` (the `metrics-reader` ClusterRole) can read them.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use super::auth::Authorizer;
use super::{Error, Manager};
use crate::metrics;

/// A client gets this long to send a request's headers, and to finish a TLS handshake.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A listen address as Kubernetes components write it: `:8081` (every interface), `127.0.0.1:8080`,
/// `[::1]:8443`, `localhost:8080`; `0` turns the endpoint off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindAddress(Option<String>);

impl BindAddress {
    /// Whether the endpoint is turned off (`0`).
    pub fn is_off(&self) -> bool {
        self.0.is_none()
    }
}

impl FromStr for BindAddress {
    type Err = String;

    fn from_str(address: &str) -> Result<Self, String> {
        if address == "0" {
            return Ok(BindAddress(None));
        }
        let port = address.rsplit_once(':').map(|(_, port)| port);
        match port.map(str::parse::<u16>) {
            Some(Ok(_)) => Ok(BindAddress(Some(address.to_string()))),
            _ => Err(format!("`{address}` is not HOST:PORT, :PORT or 0 (off)")),
        }
    }
}

impl std::fmt::Display for BindAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_deref().unwrap_or("0"))
    }
}

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

pub(crate) type Handler =
    Arc<dyn Fn(Request<Incoming>) -> BoxFuture<'static, Response<String>> + Send + Sync>;

pub(crate) fn text(status: StatusCode, body: &str) -> Response<String> {
    let mut response = Response::new(format!("{body}\n"));
    *response.status_mut() = status;
    let content_type = HeaderValue::from_static("text/plain; charset=utf-8");
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}

/// Binds `address`; `:PORT` means every interface: IPv6 and IPv4 where the host has IPv6, else IPv4.
pub(crate) async fn listen(address: &BindAddress) -> Result<Option<TcpListener>, Error> {
    let Some(address) = &address.0 else {
        return Ok(None);
    };
    let bound = match address.strip_prefix(':') {
        Some(port) => match TcpListener::bind(format!("[::]:{port}")).await {
            Ok(listener) => Ok(listener),
            Err(_) => TcpListener::bind(format!("0.0.0.0:{port}")).await,
        },
        None => TcpListener::bind(address.as_str()).await,
    };
    bound.map(Some).map_err(|source| Error::Bind {
        address: address.clone(),
        source,
    })
}

pub(crate) fn local_address(
    listener: &TcpListener,
    address: &BindAddress,
) -> Result<SocketAddr, Error> {
    listener.local_addr().map_err(|source| Error::Bind {
        address: address.to_string(),
        source,
    })
}

/// Accepts connections until `stop` resolves, each served by its own task.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: Handler,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // E.g. out of file descriptors: wait a little rather than spin.
                warn!(%error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (tls, handler) = (tls.clone(), handler.clone());
        tokio::spawn(async move {
            let Some(acceptor) = tls else {
                return serve_connection(stream, handler).await;
            };
            match tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => serve_connection(stream, handler).await,
                Ok(Err(error)) => debug!(%peer, %error, "TLS handshake failed"),
                Err(_) => debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

async fn serve_connection<IO>(io: IO, handler: Handler)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(handler(request).await) }
    });
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(CLIENT_TIMEOUT);
    if let Err(error) = http.serve_connection(TokioIo::new(io), service).await {
        debug!(%error, "HTTP connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses() {
        let parse = |s: &str| s.parse::<BindAddress>();
        assert!(parse("0").unwrap().is_off());
        for ok in [":8081", "127.0.0.1:8080", "[::1]:8443", "localhost:0"] {
            assert_eq!(parse(ok).unwrap().to_string(), ok);
        }
        for bad in ["", "8080", ":http", "localhost", "1.2.3.4:99999"] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn verbs() {
        assert_eq!(verb(&Method::GET), "get");
        assert_eq!(verb(&Method::HEAD), "get");
        assert_eq!(verb(&Method::POST), "create");
        assert_eq!(verb(&Method::OPTIONS), "options");
    }
}
