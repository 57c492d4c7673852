//! Serving HTTP(S) for the manager's endpoints and the webhook server: listen addresses as
//! Kubernetes components write them, and one task per connection with client timeouts.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use crate::error::Error;

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

/// Answers one request.
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
}
