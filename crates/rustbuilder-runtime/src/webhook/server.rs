//! The HTTPS server the API server calls: `POST <path>` with a review as JSON, answered by
//! [`Webhooks::handle`].

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::oneshot;
use tracing::{debug, info};

use super::Webhooks;
use crate::error::Error;
use crate::serve::{self, BindAddress, Handler};
use crate::tls::{self, CertSource};

/// The largest review body read: an object and its old version, each up to etcd's 1.5 MiB limit,
/// fit with room to spare.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// A running webhook server. It serves until dropped (or [`Server::stop`]).
///
/// The manager starts one in [`Controllers::run`](crate::manager::Controllers::run); a test can start
/// one on its own with the port and certificate directory of its envtest:
///
/// ```no_run
/// # async fn demo(port: u16, dir: std::path::PathBuf) -> Result<(), rustbuilder_runtime::manager::Error> {
/// use rustbuilder_runtime::manager::CertSource;
/// use rustbuilder_runtime::webhook::{Server, Webhooks};
///
/// let webhooks = Webhooks::new();
/// // webhooks.defaulter(...); webhooks.validator(...);
/// let cert = CertSource::Files { cert: dir.join("tls.crt"), key: dir.join("tls.key") };
/// let server = Server::start(webhooks, &format!("127.0.0.1:{port}").parse().unwrap(), cert).await?;
/// // ... the API server calls the webhooks ...
/// drop(server);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Server {
    address: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl Server {
    /// Listens on `address` (`:9443` is every interface) with the certificate from `cert` and serves
    /// `webhooks` (including those registered later). Files are checked first: a missing certificate
    /// or key is an error that says how to provide one. Mounted files are re-read when they change.
    pub async fn start(
        webhooks: Webhooks,
        address: &BindAddress,
        cert: CertSource,
    ) -> Result<Server, Error> {
        if address.is_off() {
            return Err(Error::config("the webhook server needs a port, not 0"));
        }
        check_files(&cert)?;
        let acceptor = tls::acceptor(cert).map_err(|e| Error::Webhook {
            reason: "cannot serve TLS".into(),
            source: Some(e.into()),
        })?;
        let listener = serve::listen(address)
            .await?
            .expect("an address that is not off");
        let bound = serve::local_address(&listener, address)?;
        info!(address = %bound, paths = ?webhooks.paths(), "serving webhooks");
        let handler: Handler = Arc::new(move |request| {
            let webhooks = webhooks.clone();
            async move {
                let (started, path) = (Instant::now(), request.uri().path().to_string());
                let response = answer(&webhooks, request).await;
                // Registered paths only: a scan of other paths must not add series.
                let metrics = webhooks
                    .metrics()
                    .filter(|_| webhooks.paths().contains(&path));
                if let Some(metrics) = metrics {
                    let code = response.status().as_u16();
                    metrics.observe_webhook(&path, code, started.elapsed());
                }
                response
            }
            .boxed()
        });
        let (stop, stopped) = oneshot::channel::<()>();
        // An error means the sender was dropped: stop as well.
        let stopped = stopped.map(|_| ());
        tokio::spawn(serve::serve(listener, Some(acceptor), handler, stopped));
        Ok(Server {
            address: bound,
            _stop: stop,
        })
    }

    /// The address the server listens on (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Stops accepting connections (requests in flight are answered). Dropping the server does the
    /// same.
    pub fn stop(self) {}
}

/// Reads the request's body and hands it to the registry.
async fn answer(webhooks: &Webhooks, request: Request<Incoming>) -> Response<String> {
    if request.method() != Method::POST {
        return serve::text(StatusCode::METHOD_NOT_ALLOWED, "webhooks take POST");
    }
    let path = request.uri().path().to_string();
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(error) => {
            debug!(%path, %error, "cannot read a webhook request");
            return serve::text(StatusCode::BAD_REQUEST, &error.to_string());
        }
    };
    // A slow webhook holds this connection only: the API server gives up after the timeout of the
    // webhook's configuration (10 s by default) and applies its failure policy.
    match webhooks.handle(&path, &body).await {
        Some(answer) => json(answer),
        None => serve::text(StatusCode::NOT_FOUND, "no webhook on this path"),
    }
}

fn json(body: Vec<u8>) -> Response<String> {
    // serde_json writes UTF-8.
    let mut response = Response::new(String::from_utf8(body).unwrap_or_default());
    let content_type = HeaderValue::from_static("application/json");
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}

/// A missing file gets an error naming both files and how to provide them.
fn check_files(cert: &CertSource) -> Result<(), Error> {
    let CertSource::Files { cert, key } = cert else {
        return Ok(());
    };
    match [cert, key].into_iter().find(|file| !file.is_file()) {
        Some(missing) => Err(Error::Webhook {
            reason: missing_certificate(cert, key, missing),
            source: None,
        }),
        None => Ok(()),
    }
}

/// Where `make certs` writes the certificate, the manager's `--webhook-cert-path` default.
const LOCAL_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

fn missing_certificate(cert: &Path, key: &Path, missing: &Path) -> String {
    let dir = cert.parent().unwrap_or(Path::new("."));
    let make_certs = if dir == Path::new(LOCAL_CERT_DIR) {
        "make certs".to_string()
    } else {
        format!("make certs WEBHOOK_CERT_PATH={}", dir.display())
    };
    format!(
        "no serving certificate: {} does not exist\n\
         help: webhooks are registered, so the manager serves them over HTTPS with the certificate {} \
         and its key {}. On a workstation, `{make_certs}` writes a self-signed pair there, then \
         `make run`; or run without the webhooks: `make run ENABLE_WEBHOOKS=false` \
         (ENABLE_WEBHOOKS=false, --enable-webhooks=false). In a cluster, `make deploy` has \
         cert-manager issue them into the mounted Secret; in tests, point --webhook-cert-path \
         (WEBHOOK_CERT_PATH) at rustbuilder_envtest's TestEnv::webhook_cert_dir()",
        missing.display(),
        cert.display(),
        key.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_certificate_names_both_files_and_the_ways_out() {
        let cert = Path::new(LOCAL_CERT_DIR).join("tls.crt");
        let key = Path::new(LOCAL_CERT_DIR).join("tls.key");
        let message = missing_certificate(&cert, &key, &key);
        for part in [
            "no serving certificate: /tmp/k8s-webhook-server/serving-certs/tls.key does not exist\n",
            "the certificate /tmp/k8s-webhook-server/serving-certs/tls.crt and its key /tmp/k8s-webhook-server/serving-certs/tls.key",
            "`make certs` writes a self-signed pair there",
            "`make run ENABLE_WEBHOOKS=false`",
        ] {
            assert!(message.contains(part), "{part:?} in: {message}");
        }
        // Elsewhere, `make certs` is told where.
        let message = missing_certificate(
            Path::new("/certs/tls.crt"),
            Path::new("/certs/tls.key"),
            Path::new("/certs/tls.crt"),
        );
        assert!(
            message.contains("`make certs WEBHOOK_CERT_PATH=/certs` writes"),
            "{message}"
        );
    }
}
